"""OfficeQA's CSV and parsed-corpus layouts, written by the tests as fixture files."""
import csv
import sys

import pytest

from whale_jax.tasks.docqa import files as docqa_files

PAGE_LEVEL = """--- PAGE 1 ---

Treasury Bulletin, January 1941

--- PAGE 2 ---

Table FD-1. Budget expenditures
(In millions of dollars)

| Fiscal year | National defense | Total |
| --- | --- | --- |
| 1940 | 2,602 | 9,055 |

--- PAGE 3 ---

Notes only.
"""


def write_csv(path, header, rows):
  with open(path, "w", newline="", encoding="utf-8") as file:
    writer = csv.writer(file)
    writer.writerow(header)
    writer.writerows(rows)
  return str(path)


@pytest.fixture
def corpus_dir(tmp_path):
  folder = tmp_path / "transformed"
  folder.mkdir()
  (folder / "treasury_bulletin_1941_01.txt").write_text(PAGE_LEVEL)
  (folder / "treasury_bulletin_1954_02.txt").write_text(
      "Plain text without page marks.\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n")
  (folder / "notes.md").write_text("# Notes\n\nMarkdown is read too.\f Second page.")
  return folder


def test_page_marks_tables_and_form_feeds(corpus_dir):
  corpus = docqa_files.load_corpus(corpus_dir)
  assert sorted(corpus) == ["notes", "treasury_bulletin_1941_01", "treasury_bulletin_1954_02"]
  bulletin = corpus["treasury_bulletin_1941_01"]
  assert len(bulletin.pages) == 3
  assert bulletin.pages[0] == "Treasury Bulletin, January 1941"
  [table] = bulletin.tables
  assert (table.number, table.page) == (1, 2)
  assert table.caption == "Table FD-1. Budget expenditures (In millions of dollars)"
  assert table.text.splitlines()[2] == "| 1940 | 2,602 | 9,055 |"
  assert len(corpus["notes"].pages) == 2
  assert len(corpus["treasury_bulletin_1954_02"].pages) == 1
  assert len(corpus["treasury_bulletin_1954_02"].tables) == 1


def test_text_without_marks_is_cut_into_pages_at_blank_lines():
  blocks = [f"block {i} " + "x" * 1500 for i in range(6)]
  pages = docqa_files.split_pages("\n\n".join(blocks))
  assert len(pages) == 3  # two 1.5k-character blocks fit in a 4k page, three do not
  assert pages[0].startswith("block 0") and pages[1].startswith("block 2")


def test_officeqa_csv_with_source_files(tmp_path, corpus_dir):
  corpus = docqa_files.load_corpus(corpus_dir)
  path = write_csv(tmp_path / "officeqa_pro.csv",
                   ["uid", "question", "answer", "source_docs", "source_files", "difficulty"],
                   [["UID0001", "Defense outlays in 1940?", "2,602",
                     "https://fraser.stlouisfed.org/title/treasury-bulletin-407/january-1941-6529"
                     "?page=15", "treasury_bulletin_1941_01.txt", "hard"],
                    ["UID0004", "Difference?", "1608.80%", "url1\nurl2",
                     "treasury_bulletin_1941_01.txt\ntreasury_bulletin_1954_02.txt", "easy"]])
  records = docqa_files.load_officeqa_questions(path, corpus)
  assert records == [
      {"id": "officeqa:UID0001", "question": "Defense outlays in 1940?", "answer": "2,602",
       "source_files": ["treasury_bulletin_1941_01"], "difficulty": "hard"},
      {"id": "officeqa:UID0004", "question": "Difference?", "answer": "1608.80%",
       "source_files": ["treasury_bulletin_1941_01", "treasury_bulletin_1954_02"],
       "difficulty": "easy"}]


def test_older_csv_maps_fraser_urls_to_file_names(tmp_path, corpus_dir):
  corpus = docqa_files.load_corpus(corpus_dir)
  path = write_csv(tmp_path / "officeqa.csv", ["uid", "question", "answer", "source_docs",
                                               "difficulty"],
                   [["UID0003", "Sum?", "44,463",
                     "https://fraser.stlouisfed.org/title/treasury-bulletin-407/february-1954-"
                     "6685?page=14", "hard"]])
  [record] = docqa_files.load_officeqa_questions(path, corpus)
  assert record["source_files"] == ["treasury_bulletin_1954_02"]
  assert docqa_files.source_file_from_url(
      "https://fraser.stlouisfed.org/title/treasury-bulletin-407/june-2025-687694 page 76") == (
          "treasury_bulletin_2025_06.txt")


HEADER = ["uid", "question", "answer", "source_docs", "source_files", "difficulty"]


@pytest.mark.parametrize("header, row, message", [
    (["uid", "question", "source_files"], None, r"officeqa.csv: missing column\(s\) answer"),
    (["uid", "question", "answer"], None, r"missing column\(s\) source_files"),
    (HEADER, ["UID1", "Q?", "", "", "treasury_bulletin_1941_01.txt", "easy"],
     r"officeqa.csv:3: empty answer"),
    (HEADER, ["UID1", "Q?", "1", "", "treasury_bulletin_1941_01.txt", "medium"],
     r"officeqa.csv:3: difficulty 'medium'"),
    (HEADER, ["UID0", "Q?", "1", "", "treasury_bulletin_1941_01.txt", "easy"],
     r"officeqa.csv:3: uid 'UID0' appears twice"),
    (HEADER, ["UID1", "Q?", "1", "", "treasury_bulletin_1999_12.txt", "easy"],
     r"officeqa.csv:3: source file\(s\) treasury_bulletin_1999_12.txt not in the corpus"),
    (HEADER, ["UID1", "Q?", "1", "https://example.com/x", "", "easy"],
     r"officeqa.csv:3: no source_files"),
])
def test_bad_rows_name_the_file_and_row(tmp_path, corpus_dir, header, row, message):
  corpus = docqa_files.load_corpus(corpus_dir)
  first = ["UID0", "Q?", "1", "", "treasury_bulletin_1941_01.txt", "easy"][:len(header)]
  rows = [first] + ([row] if row else [])
  path = write_csv(tmp_path / "officeqa.csv", header, rows)
  with pytest.raises(ValueError, match=message):
    docqa_files.load_officeqa_questions(path, corpus)


def test_bad_corpus_folders(tmp_path):
  with pytest.raises(FileNotFoundError, match="is not a folder"):
    docqa_files.load_corpus(tmp_path / "missing")
  with pytest.raises(ValueError, match="holds no .txt"):
    docqa_files.load_corpus(tmp_path)


def test_a_pdf_without_pypdf_says_how_to_install_it(tmp_path, monkeypatch):
  (tmp_path / "treasury_bulletin_1941_01.pdf").write_bytes(b"%PDF-1.4\n")
  monkeypatch.setitem(sys.modules, "pypdf", None)
  with pytest.raises(ImportError, match=r"whale_jax\[pdf\]"):
    docqa_files.load_corpus(tmp_path)


def minimal_pdf(page_texts):
  """A PDF with one Helvetica text line per page, written by hand (offsets in the xref)."""
  objects = ["<< /Type /Catalog /Pages 2 0 R >>",
             "<< /Type /Pages /Kids [%s] /Count %d >>" % (
                 " ".join(f"{4 + 2 * i} 0 R" for i in range(len(page_texts))), len(page_texts)),
             "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
  for i, text in enumerate(page_texts):
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
    objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                   f"{5 + 2 * i} 0 R /Resources << /Font << /F1 3 0 R >> >> >>")
    objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
  out, offsets = "%PDF-1.4\n", []
  for number, body in enumerate(objects, 1):
    offsets.append(len(out))
    out += f"{number} 0 obj\n{body}\nendobj\n"
  xref = len(out)
  out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n"
  out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets)
  out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
  return out.encode("latin-1")


def test_pdf_pages_through_pypdf(tmp_path):
  pytest.importorskip("pypdf", reason="the optional pdf extra (pip install 'whale_jax[pdf]')")
  (tmp_path / "treasury_bulletin_1941_01.pdf").write_bytes(
      minimal_pdf(["Treasury Bulletin January 1941", "National defense 2,602"]))
  [document] = docqa_files.load_corpus(tmp_path).values()
  assert document.id == "treasury_bulletin_1941_01"
  assert [page.strip() for page in document.pages] == ["Treasury Bulletin January 1941",
                                                       "National defense 2,602"]
