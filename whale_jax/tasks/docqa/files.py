"""Document corpora and OfficeQA question files: pages, tables, and the CSV layout.

  corpus = load_corpus("treasury_bulletins_parsed/transformed")   # {doc id: Document}
  questions = load_officeqa_questions("officeqa_pro.csv", corpus)

Corpus: a folder of .txt and .md files (and .pdf with the optional `pdf` extra, pypdf). A
document's id is its file name without the extension (treasury_bulletin_1941_01). Pages are
the "--- PAGE n ---" sections of OfficeQA's page-level transform, form-feed separated pages, or
PDF pages; text without page marks is cut into pages of about PAGE_CHARS characters at blank
lines. A table is a run of lines starting with "|" (the Markdown tables of OfficeQA's
transform); tables are numbered from 1 through the document.

Questions: OfficeQA's CSV, columns uid, question, answer, difficulty, and source_files
(parsed file names, one per line or separated by ";" or ",") or, in the older files without
it, source_docs (FRASER URLs .../treasury-bulletin-407/<month>-<year>-<id>?page=n, mapped to
treasury_bulletin_<year>_<month number>.txt as OfficeQA's README describes). Bad rows and
source files missing from the corpus are errors naming the file and row.
"""
import csv
import dataclasses
import os
import re

PAGE_CHARS = 4000
_PAGE_MARK = re.compile(r"^--- PAGE (\d+) ---\s*$", re.MULTILINE)
_FRASER_ISSUE = re.compile(r"treasury-bulletin-\d+/([a-z]+)-(\d{4})-\d+", re.IGNORECASE)
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
REQUIRED_COLUMNS = ("uid", "question", "answer")
DIFFICULTIES = ("easy", "hard")
TEXT_SUFFIXES = (".txt", ".md")


@dataclasses.dataclass(frozen=True)
class Table:
  """One Markdown table: its number in the document, its page (1-based) and its text."""
  number: int
  page: int
  text: str
  caption: str


@dataclasses.dataclass(frozen=True)
class Document:
  """A document as pages (1-based when shown) and the tables found in them."""
  id: str
  pages: tuple[str, ...]
  tables: tuple[Table, ...]


def split_pages(text):
  """Pages of a text: page marks, form feeds, or ~PAGE_CHARS chunks cut at blank lines."""
  marks = list(_PAGE_MARK.finditer(text))
  if marks:
    pages = [text[mark.end():(marks[i + 1].start() if i + 1 < len(marks) else len(text))]
             for i, mark in enumerate(marks)]
    return [page.strip("\n") for page in pages]
  if "\f" in text:
    return [page.strip("\n") for page in text.split("\f")]
  pages, current = [], ""
  for block in re.split(r"\n\s*\n", text):
    if current and len(current) + len(block) > PAGE_CHARS:
      pages.append(current)
      current = ""
    current = f"{current}\n\n{block}" if current else block
  return pages + [current] if current or not pages else pages


def find_tables(pages):
  """The Markdown tables of the pages, each captioned by the two non-empty lines above it."""
  tables = []
  for page_number, page in enumerate(pages, 1):
    lines = page.split("\n")
    start = None
    for i, line in enumerate(lines + [""]):
      if line.lstrip().startswith("|"):
        if start is None:
          start = i
        continue
      if start is not None:
        above = [lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()]
        caption = " ".join(reversed(above[:2]))
        tables.append(Table(len(tables) + 1, page_number, "\n".join(lines[start:i]), caption))
        start = None
  return tuple(tables)


def make_document(doc_id, pages):
  pages = tuple(pages) or ("",)
  return Document(doc_id, pages, find_tables(pages))


def _pdf_pages(path):
  try:
    import pypdf  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ImportError(f"{path} is a PDF; reading PDFs needs pypdf: pip install "
                      "'whale_jax[pdf]' (or convert the corpus to .txt).") from None
  return [page.extract_text() or "" for page in pypdf.PdfReader(path).pages]


def load_document(path):
  """One Document from a .txt, .md or .pdf file."""
  path = os.fspath(path)
  doc_id, suffix = os.path.splitext(os.path.basename(path))
  if suffix.lower() == ".pdf":
    return make_document(doc_id, _pdf_pages(path))
  if suffix.lower() not in TEXT_SUFFIXES:
    raise ValueError(f"{path}: corpus files must be .txt, .md or .pdf; got {suffix!r}.")
  with open(path, encoding="utf-8", errors="replace") as file:
    return make_document(doc_id, split_pages(file.read()))


def load_corpus(folder):
  """{doc id: Document} for every .txt/.md/.pdf file in folder (not recursive)."""
  folder = os.fspath(folder)
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"corpus={folder!r} is not a folder; give the folder of parsed "
                            "documents (e.g. treasury_bulletins_parsed/transformed).")
  names = sorted(name for name in os.listdir(folder)
                 if name.lower().endswith(TEXT_SUFFIXES + (".pdf",)))
  if not names:
    raise ValueError(f"corpus folder {folder} holds no .txt, .md or .pdf files.")
  corpus = {}
  for name in names:
    document = load_document(os.path.join(folder, name))
    if document.id in corpus:
      raise ValueError(f"{folder}: two files have the document id {document.id!r} (e.g. a "
                       ".txt and a .pdf); keep one.")
    corpus[document.id] = document
  return corpus


def source_file_from_url(url):
  """treasury_bulletin_<year>_<mm>.txt for a FRASER treasury-bulletin URL, or None."""
  match = _FRASER_ISSUE.search(url)
  if not match or match.group(1).lower() not in _MONTHS:
    return None
  month = _MONTHS.index(match.group(1).lower()) + 1
  return f"treasury_bulletin_{match.group(2)}_{month:02d}.txt"


def _split_list(text):
  return [item.strip() for item in re.split(r"[\n;,]+", text or "") if item.strip()]


def load_officeqa_questions(path, corpus=None):
  """Question records from an OfficeQA CSV.

  Args:
    path: the CSV (officeqa_pro.csv, officeqa_full.csv, officeqa.csv).
    corpus: {doc id: Document}; when given, every source file must be in it.
  Returns:
    [{"id": "officeqa:<uid>", "question", "answer", "source_files": [doc ids], "difficulty"}]
  """
  path = os.fspath(path)
  with open(path, encoding="utf-8-sig", newline="") as file:
    reader = csv.DictReader(file)
    columns = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if not {"source_files", "source_docs"} & set(columns):
      missing.append("source_files")
    if missing:
      raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; OfficeQA CSVs have "
                       "uid, question, answer, source_docs, source_files, difficulty (found "
                       f"{', '.join(columns) or 'none'}).")
    records, seen = [], set()
    for row_number, row in enumerate(reader, 2):
      where = f"{path}:{row_number}"
      uid, question, answer = (str(row.get(c) or "").strip() for c in REQUIRED_COLUMNS)
      if not uid or not question or not answer:
        empty = [c for c, v in zip(REQUIRED_COLUMNS, (uid, question, answer)) if not v]
        raise ValueError(f"{where}: empty {', '.join(empty)}; every row needs a uid, a question "
                         "and an answer.")
      if uid in seen:
        raise ValueError(f"{where}: uid {uid!r} appears twice; uids must be unique.")
      seen.add(uid)
      difficulty = str(row.get("difficulty") or "").strip().lower()
      if difficulty and difficulty not in DIFFICULTIES:
        raise ValueError(f"{where}: difficulty {difficulty!r}; use one of "
                         f"{', '.join(DIFFICULTIES)} or leave it empty.")
      files = _split_list(row.get("source_files"))
      if not files:
        urls = _split_list((row.get("source_docs") or "").replace(" page ", "?page="))
        files = [source_file_from_url(url) for url in urls]
        if not urls or None in files:
          raise ValueError(f"{where}: no source_files, and source_docs {row.get('source_docs')!r} "
                           "holds no treasury-bulletin URL to map to a file name.")
      doc_ids = list(dict.fromkeys(os.path.splitext(name)[0] for name in files))
      if corpus is not None:
        absent = [name for name in files if os.path.splitext(name)[0] not in corpus]
        if absent:
          raise ValueError(f"{where}: source file(s) {', '.join(absent)} not in the corpus "
                           f"({len(corpus)} documents); add them to the corpus folder.")
      records.append({"id": f"officeqa:{uid}", "question": question, "answer": answer,
                      "source_files": doc_ids, "difficulty": difficulty})
  if not records:
    raise ValueError(f"{path} holds no question rows.")
  return records
