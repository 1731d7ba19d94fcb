"""Offline bulletin-like documents with tables, and questions that need them.

  texts, questions = generate_bulletins(seed=0, num_issues=6)
  texts["fiscal_bulletin_1942_07"]   # '--- PAGE 1 ---\\n\\nJuly 1942 Fiscal Bulletin, page 1...'
  questions[0] == {"id": "docqa:0", "question": "...", "answer": "2,602",
                   "source_files": ["fiscal_bulletin_1942_07"], "difficulty": "easy",
                   "kind": "lookup"}

A seeded fictional treasury publishes a bulletin twice a year (January and July). Each issue
has four pages in OfficeQA's page-level layout ("--- PAGE n ---"), each under a running
head naming the issue: an overview with the date
of a savings-note offering, Table 1 (budget receipts by source) and Table 2 (budget
expenditures by agency) for the three latest fiscal years in millions of dollars, each with
totals and footnotes, and a page on the public debt. Later issues may revise an earlier
figure, marked "r" in the table, so a figure depends on which issue reports it, as in the
Treasury Bulletins.

Question kinds (difficulty):
  lookup          (easy)  one cell of one table of one issue.
  date            (easy)  the offering date stated in an issue's overview.
  cross_table     (hard)  total receipts (Table 1) minus total expenditures (Table 2).
  share           (hard)  a source's percent of total receipts, to the hundredth.
  multi_document  (hard)  percent change of an agency's expenditures between a year of an
                          older issue and a later year found only in a newer issue.
Answers are written as the OfficeQA CSVs write them ("2,602", "-1,234", "12.34%",
"March 3, 1942") and score 1 under docqa_answers at tolerance 0 when reproduced exactly.
"""
import random

SOURCES = ("Individual income tax", "Corporation income tax", "Customs duties",
           "Excise taxes", "Estate and gift taxes", "Miscellaneous revenue")
AGENCIES = ("Department of Agriculture", "Department of Commerce", "Navy Department",
            "War Department", "Veterans Administration", "Treasury Department",
            "Federal Works Agency")
SERIES = ("A", "B", "C", "D", "E", "F", "G", "H", "J", "K", "N", "P")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December")
ISSUE_MONTHS = (1, 7)
YEARS_PER_ISSUE = 3
KINDS = ("lookup", "date", "cross_table", "share", "multi_document")
DIFFICULTY = {"lookup": "easy", "date": "easy", "cross_table": "hard", "share": "hard",
              "multi_document": "hard"}


def issue_id(year, month):
  return f"fiscal_bulletin_{year}_{month:02d}"


def issue_name(year, month):
  return f"{MONTH_NAMES[month - 1]} {year}"


def _table(label, years, rows, total_label):
  header = f"| {label} | " + " | ".join(f"Fiscal year {year}" for year in years) + " |"
  lines = [header, "| --- |" + " --- |" * len(years)]
  for name, cells in rows:
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  totals = [f"{sum(int(c.split()[0].replace(',', '')) for c in column):,}"
            for column in zip(*(cells for _, cells in rows))]
  lines.append(f"| {total_label} | " + " | ".join(totals) + " |")
  return "\n".join(lines)


def generate_bulletins(seed=0, num_issues=6, first_year=1941, revision_rate=0.25):
  """(texts, questions) for one seeded series of bulletins.

  Returns:
    texts: {doc id: text with page marks}.
    questions: [{"id", "question", "answer", "source_files", "difficulty", "kind"}].
  """
  if num_issues < 2:
    raise ValueError(f"num_issues={num_issues}: multi-document questions need at least 2 "
                     "issues.")
  random_state = random.Random(seed)
  issues = [(first_year + k // 2, ISSUE_MONTHS[k % 2]) for k in range(num_issues)]
  # Issue (y, m) reports the fiscal years ending before it: y-3..y-1 (January), y-2..y (July).
  def years_of(issue):
    year, month = issue
    last = year - 1 if month == 1 else year
    return list(range(last - YEARS_PER_ISSUE + 1, last + 1))

  all_years = sorted({y for issue in issues for y in years_of(issue)})
  receipts = {(s, y): random_state.randint(40, 3000) for s in SOURCES for y in all_years}
  outlays = {(a, y): random_state.randint(30, 2600) for a in AGENCIES for y in all_years}
  reported, texts, offerings = {}, {}, {}
  first_report = {}
  for issue in issues:
    doc = issue_id(*issue)
    values = {}
    for table, truth in (("receipts", receipts), ("outlays", outlays)):
      for (name, year), value in truth.items():
        if year not in years_of(issue):
          continue
        key = (table, name, year)
        revised = key in first_report and random_state.random() < revision_rate
        if revised:
          value = value + random_state.choice((-1, 1)) * random_state.randint(1, 60)
          truth[(name, year)] = value
        first_report.setdefault(key, doc)
        values[key] = (value, revised)
    reported[doc] = values
    year, month = issue
    offering_month = random_state.randint(1, 12) if month == 7 else random_state.randint(1, 6)
    offering_year = year if month == 7 or offering_month < month else year - 1
    offerings[doc] = (SERIES[len(offerings) % len(SERIES)], offering_year, offering_month,
                      random_state.randint(1, 28))
    texts[doc] = _render_issue(issue, years_of(issue), values, offerings[doc], random_state)

  questions = []

  def ask(kind, question, answer, docs):
    questions.append({"id": f"docqa:{len(questions)}", "question": question, "answer": answer,
                      "source_files": docs, "difficulty": DIFFICULTY[kind], "kind": kind})

  for issue in issues:
    doc, name = issue_id(*issue), issue_name(*issue)
    years = years_of(issue)
    values = reported[doc]
    for year in years:
      source = random_state.choice(SOURCES)
      ask("lookup", f"According to the {name} Fiscal Bulletin, what were budget receipts from "
          f"{source.lower()} in fiscal year {year}, in millions of dollars?",
          f"{values[('receipts', source, year)][0]:,}", [doc])
      agency = random_state.choice(AGENCIES)
      ask("lookup", f"According to the {name} Fiscal Bulletin, what were the budget "
          f"expenditures of the {agency} in fiscal year {year}, in millions of dollars?",
          f"{values[('outlays', agency, year)][0]:,}", [doc])
      total_receipts = sum(values[("receipts", s, year)][0] for s in SOURCES)
      total_outlays = sum(values[("outlays", a, year)][0] for a in AGENCIES)
      ask("cross_table", f"According to the {name} Fiscal Bulletin, what was the budget surplus "
          f"(total receipts minus total expenditures) in fiscal year {year}, in millions of "
          "dollars? Report a deficit as a negative number.",
          f"{total_receipts - total_outlays:,}", [doc])
      source = random_state.choice(SOURCES)
      share = 100 * values[("receipts", source, year)][0] / total_receipts
      ask("share", f"According to the {name} Fiscal Bulletin, what percent of total budget "
          f"receipts in fiscal year {year} came from {source.lower()}? Round to the nearest "
          "hundredth and report a percent value (12.34%, not 0.1234).", f"{share:.2f}%", [doc])
    series, year, month, day = offerings[doc]
    ask("date", f"On what date did the Treasury announce the Series {series} savings notes "
        f"described in the {name} Fiscal Bulletin? Report the U.S. long date format.",
        f"{MONTH_NAMES[month - 1]} {day}, {year}", [doc])
  for older, newer in zip(issues, issues[1:]):
    for _ in range(2):
      newer_only = [y for y in years_of(newer) if y not in years_of(older)]
      if not newer_only:
        continue
      agency = random_state.choice(AGENCIES)
      old_year = random_state.choice(years_of(older))
      new_year = random_state.choice(newer_only)
      old_value = reported[issue_id(*older)][("outlays", agency, old_year)][0]
      new_value = reported[issue_id(*newer)][("outlays", agency, new_year)][0]
      change = 100 * (new_value - old_value) / old_value
      ask("multi_document", f"What was the percent change in budget expenditures of the "
          f"{agency} from fiscal year {old_year}, as reported in the {issue_name(*older)} Fiscal "
          f"Bulletin, to fiscal year {new_year}, as reported in the {issue_name(*newer)} Fiscal "
          "Bulletin? Round to the nearest hundredth and report a percent value (12.34%).",
          f"{change:.2f}%", [issue_id(*older), issue_id(*newer)])
  return texts, questions


def _cell(value, revised):
  return f"{value:,} r" if revised else f"{value:,}"


def _render_issue(issue, years, values, offering, random_state):
  year, month = issue
  series, offering_year, offering_month, day = offering
  debt = random_state.randint(40_000, 90_000)
  footnoted = random_state.choice(SOURCES)
  receipt_rows = [(f"{s} 1/" if s == footnoted else s,
                   [_cell(*values[("receipts", s, y)]) for y in years]) for s in SOURCES]
  outlay_rows = [(a, [_cell(*values[("outlays", a, y)]) for y in years]) for a in AGENCIES]
  span = f"{years[0]}-{years[-1]}"
  pages = [
      f"Fiscal Bulletin, {issue_name(year, month)}\n\nTreasury Department, Office of the "
      f"Secretary\n\nSummary of fiscal operations. On {MONTH_NAMES[offering_month - 1]} {day}, "
      f"{offering_year}, the Treasury announced an offering of Series {series} savings notes, "
      "sold at par in denominations from 25 to 10,000 dollars. Budget receipts and "
      "expenditures for the latest fiscal years are shown in Tables 1 and 2.",
      f"Table 1. Budget receipts by source, fiscal years {span}\n(In millions of dollars)\n\n"
      + _table("Source", years, receipt_rows, "Total receipts") +
      f"\n\n1/ {footnoted} include amounts collected under prior revenue acts.\n"
      "r Revised.\nSource: Daily Treasury Statement.",
      f"Table 2. Budget expenditures by agency, fiscal years {span}\n(In millions of dollars)"
      "\n\n" + _table("Agency", years, outlay_rows, "Total expenditures") +
      "\n\nr Revised.\nExpenditures exclude transfers to trust accounts and debt retirement.",
      f"Public debt\n\nThe gross public debt outstanding at the end of {MONTH_NAMES[month - 2]} "
      f"{year if month > 1 else year - 1} amounted to {debt:,} million dollars. Interest-bearing "
      "obligations made up most of the total.",
  ]
  head = f"{issue_name(year, month)} Fiscal Bulletin"  # the running head of every page
  return "\n\n".join(f"--- PAGE {i} ---\n\n{head}, page {i}\n\n{page}"
                     for i, page in enumerate(pages, 1)) + "\n"
