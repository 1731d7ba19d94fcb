"""The document-QA domain: generated bulletins, its tools, its metrics, and h0 end to end."""
import json
import re

import pytest

from whale_jax import tasks
from whale_jax.harness import sandbox_process
from whale_jax.harness.program import Harness
from whale_jax.harness.runtime import HarnessRuntime
from whale_jax.harness.scripted_backend import ScriptedBackend
from whale_jax.harness.trajectory import ToolEvent, Trajectory
from whale_jax.sampling.api import SamplingParams
from whale_jax.tasks.docqa import generator as docqa_generator
from whale_jax.tokenization import load_tokenizer

TOKENIZER = load_tokenizer("byte")
SAMPLING = SamplingParams(max_tokens=400)
MONTHS = docqa_generator.MONTH_NAMES


@pytest.fixture(scope="module")
def generated():
  return docqa_generator.generate_bulletins(seed=3, num_issues=4)


@pytest.fixture(scope="module")
def domain():
  return tasks.get_domain("docqa", seed=3, num_issues=4,
                          split_sizes={"weight": 20, "harness": 4, "validation": 4, "test": 8})


def parse_tables(text):
  """{table title word ("receipts"/"expenditures"): {row label: {year: int}}} from Markdown."""
  tables = {}
  for page in text.split("--- PAGE ")[1:]:
    lines = [line for line in page.splitlines() if line.startswith("|")]
    if not lines:
      continue
    kind = "receipts" if "Budget receipts" in page else "expenditures"
    years = [int(cell.split()[-1]) for cell in lines[0].strip("|").split("|")[1:]]
    rows = {}
    for line in lines[2:]:
      cells = [cell.strip() for cell in line.strip("|").split("|")]
      label = re.sub(r" \d/$", "", cells[0])
      rows[label.lower()] = {year: int(cell.split()[0].replace(",", ""))
                             for year, cell in zip(years, cells[1:])}
    tables[kind] = rows
  return tables


def doc_of(issue_text):
  month, year = issue_text.split()
  return f"fiscal_bulletin_{year}_{MONTHS.index(month) + 1:02d}"


def expected_answer(question, texts):
  """The answer recomputed from the rendered documents alone."""
  text = question["question"]
  issues = re.findall(r"the (\w+ \d{4}) Fiscal Bulletin", text)
  tables = [parse_tables(texts[doc_of(issue)]) for issue in issues]
  years = [int(y) for y in re.findall(r"fiscal year (\d{4})", text)]
  if question["kind"] == "lookup":
    if "receipts from" in text:
      source = re.search(r"receipts from (.+?) in fiscal year", text).group(1)
      return f"{tables[0]['receipts'][source][years[0]]:,}"
    agency = re.search(r"expenditures of the (.+?) in fiscal year", text).group(1).lower()
    return f"{tables[0]['expenditures'][agency][years[0]]:,}"
  if question["kind"] == "cross_table":
    surplus = (tables[0]["receipts"]["total receipts"][years[0]] -
               tables[0]["expenditures"]["total expenditures"][years[0]])
    return f"{surplus:,}"
  if question["kind"] == "share":
    source = re.search(r"came from (.+?)\?", text).group(1)
    rows = tables[0]["receipts"]
    return f"{100 * rows[source][years[0]] / rows['total receipts'][years[0]]:.2f}%"
  if question["kind"] == "multi_document":
    agency = re.search(r"expenditures of the (.+?) from", text).group(1).lower()
    old = tables[0]["expenditures"][agency][years[0]]
    new = tables[1]["expenditures"][agency][years[1]]
    return f"{100 * (new - old) / old:.2f}%"
  series = re.search(r"Series (\w+) savings", text).group(1)
  overview = texts[doc_of(issues[0])].split("--- PAGE 2")[0]
  return re.search(rf"On (\w+ \d+, \d{{4}}), the Treasury announced an offering of Series "
                   rf"{series} ", overview).group(1)


def test_every_generated_answer_follows_from_the_documents(generated):
  texts, questions = generated
  assert {q["kind"] for q in questions} == set(docqa_generator.KINDS)
  for question in questions:
    assert question["answer"] == expected_answer(question, texts), question
    assert all(doc in texts for doc in question["source_files"])
  multi = [q for q in questions if q["kind"] == "multi_document"]
  assert multi and all(len(q["source_files"]) == 2 for q in multi)


def test_totals_are_the_sums_of_their_rows_and_revisions_are_marked(generated):
  texts, _ = generated
  for text in texts.values():
    for kind, rows in parse_tables(text).items():
      total = rows.pop(f"total {kind}")
      for year, value in total.items():
        assert value == sum(row[year] for row in rows.values())
  assert any(" r |" in text for text in texts.values())


def test_search_and_open_document(domain):
  [instance] = domain.splits()["test"][:1]
  tools = domain.tools(instance)
  hits = tools["search"]("budget expenditures by agency January 1942", topk=3).splitlines()
  assert hits[0].startswith("[fiscal_bulletin_1942_01 page 3] January 1942 Fiscal Bulletin, "
                            "page 3 Table 2. Budget expenditures")
  outline = tools["open_document"]("fiscal_bulletin_1942_01")
  assert outline.splitlines()[0] == "fiscal_bulletin_1942_01: 4 pages, 2 tables."
  assert outline.splitlines()[2].startswith("table 2 (page 3): Table 2. Budget expenditures")
  page = tools["open_document"]("fiscal_bulletin_1942_01", page=1)
  assert "Fiscal Bulletin, January 1942" in page
  table = tools["open_document"]("fiscal_bulletin_1942_01", table=1)
  assert "| Total receipts |" in table and "Table 2." not in table
  for bad, message in [(dict(document="fiscal_bulletin_1942_1"), "did you mean "
                        "fiscal_bulletin_1942_01"),
                       (dict(document="fiscal_bulletin_1942_01", page=5), "pages run from 1 to 4"),
                       (dict(document="fiscal_bulletin_1942_01", table=0), "has 2 tables"),
                       (dict(document="fiscal_bulletin_1942_01", page=1, table=1), "not both")]:
    with pytest.raises(ValueError, match=message):
      tools["open_document"](**bad)
  with pytest.raises(ValueError, match="topk"):
    tools["search"]("x", topk=11)


def test_metrics_count_documents_tables_and_kinds(domain):
  instances = domain.splits()["test"][:2]
  def event(name, **arguments):
    return ToolEvent(name, arguments, "ok", "", 0.0, 0.0)
  source = instances[0].reference["source_files"][0]
  trajectories = [
      Trajectory("e0", instances[0].id, "h", "ok", answer="<FINAL_ANSWER>1</FINAL_ANSWER>",
                 tool_events=[event("open_document", document=source, table=1),
                              event("open_document", document=source, page=2),
                              event("open_document", document="other"),
                              event("search", query="q")]),
      Trajectory("e1", instances[1].id, "h", "ok", answer="no tag")]
  metrics = domain.metrics(instances, trajectories, [1.0, 0.0])
  assert metrics["documents_opened_per_episode"] == 1.0      # (2 distinct + 0) / 2
  assert metrics["tables_opened_per_episode"] == 0.5
  assert metrics["search_calls_per_episode"] == 0.5
  assert metrics["answer_format_rate"] == 0.5
  expected_source_rate = (set(instances[0].reference["source_files"]) <= {source, "other"}) / 2
  assert metrics["source_document_opened_rate"] == expected_source_rate
  kind = instances[0].reference["kind"]
  assert metrics[f"success_rate_{kind}"] == (1.0 if instances[1].reference["kind"] != kind
                                             else 0.5)


def test_questions_from_officeqa_files(tmp_path):
  folder = tmp_path / "corpus"
  folder.mkdir()
  (folder / "treasury_bulletin_1941_01.txt").write_text(
      "--- PAGE 1 ---\n\nNational defense expenditures in calendar 1940 were 2,602 million.\n")
  (tmp_path / "q.csv").write_text(
      "uid,question,answer,source_docs,source_files,difficulty\n"
      "UID0001,Defense 1940?,\"2,602\",,treasury_bulletin_1941_01.txt,hard\n")
  domain = tasks.get_domain("docqa", questions=str(tmp_path / "q.csv"), corpus=str(folder),
                            split_sizes={"test": -1}, tolerance=0.01)
  [instance] = domain.splits()["test"]
  assert instance.public == {"question": "Defense 1940?"}
  assert domain.verify(instance, "<FINAL_ANSWER>2,620</FINAL_ANSWER>") == 1.0   # within 1%
  assert domain.verify(instance, "<FINAL_ANSWER>2,700</FINAL_ANSWER>") == 0.0
  assert "2,602" in domain.tools(instance)["search"]("national defense expenditures")
  with pytest.raises(ValueError, match="needs corpus="):
    tasks.get_domain("docqa", questions=str(tmp_path / "q.csv"))


# ---------------------------------------------------------------- h0 through the real runtime

@pytest.fixture
def sent_to_sandbox(monkeypatch):
  messages = []
  send = sandbox_process.Channel.send

  def recording_send(self, message, *args, **kwargs):
    messages.append(json.dumps(message))
    return send(self, message, *args, **kwargs)
  monkeypatch.setattr(sandbox_process.Channel, "send", recording_send)
  return messages


def run_h0(domain, instances, replies):
  backend = ScriptedBackend(TOKENIZER, replies=replies)
  with HarnessRuntime(backend, TOKENIZER, num_workers=2, timeout_seconds=60) as runtime:
    episodes = [tasks.make_episode(domain, instance, SAMPLING) for instance in instances]
    trajectories = runtime.run_episodes(Harness(domain.seed_harness), episodes)
  assert [t.outcome for t in trajectories] == ["ok"] * len(instances), [
      t.error for t in trajectories]
  return trajectories, [domain.verify(i, t.answer, t) for i, t in zip(instances, trajectories)]


def cross_table_model(instances):
  """Opens table 1 (XML call), then table 2 (JSON call), subtracts the totals with python
  (numbers read from the tool responses in the prompt), then answers python's output."""
  def reply(prompt):
    instance = next(i for i in instances if i.public["question"] in prompt)
    doc = instance.reference["source_files"][0]
    year = re.search(r"fiscal year (\d{4})", instance.public["question"]).group(1)
    responses = prompt.count("<tool_response>")
    if responses == 0:
      return ("<tool_call><function=open_document><parameter=document>"
              f"{doc}</parameter><parameter=table>1</parameter></function></tool_call>")
    if responses == 1:
      return ('<tool_call>{"name": "open_document", "arguments": {"document": "%s", '
              '"table": 2}}</tool_call>' % doc)
    results = [json.loads(text)["result"]
               for text in re.findall(r"<tool_response>(.*?)</tool_response>", prompt)]

    def total(label):
      for text in results:
        lines = [line for line in text.splitlines() if line.startswith("|")]
        rows = [line for line in lines if line.startswith(f"| {label} |")]
        if rows:
          years = [cell.strip().split()[-1] for cell in lines[0].strip("|").split("|")[1:]]
          cells = [cell.strip() for cell in rows[0].strip("|").split("|")[1:]]
          return int(cells[years.index(year)].split()[0].replace(",", ""))
      raise AssertionError(f"no {label} row in the tool responses")
    if responses == 2:
      code = f"print(f'{{{total('Total receipts')} - {total('Total expenditures')}:,}}')"
      return ("<tool_call><function=python><parameter=code>" + code +
              "</parameter></function></tool_call>")
    return f"<FINAL_ANSWER>{results[-1].strip()}</FINAL_ANSWER>"
  return reply


def test_h0_opens_tables_computes_and_scores_one(domain, sent_to_sandbox):
  instances = [i for i in domain.splits()["weight"] if i.reference["kind"] == "cross_table"][:2]
  assert len(instances) == 2
  trajectories, scores = run_h0(domain, instances, cross_table_model(instances))
  assert scores == [1.0, 1.0]
  for trajectory in trajectories:
    assert [e.name for e in trajectory.tool_events] == ["open_document", "open_document",
                                                        "python"]
    assert trajectory.tool_events[0].arguments == {"document": trajectory.tool_events[
        1].arguments["document"], "page": None, "table": 1}
    assert trajectory.num_turns == 4
  metrics = domain.metrics(instances, trajectories, scores)
  assert metrics["documents_opened_per_episode"] == 1.0
  assert metrics["tables_opened_per_episode"] == 2.0
  assert metrics["source_document_opened_rate"] == 1.0


def test_gold_never_reaches_the_sandbox(domain, sent_to_sandbox):
  # Computed answers appear in no document, so a model that never states them leaves no trace
  # of them in anything sent to the sandbox.
  instances = [i for i in domain.splits()["weight"]
               if i.reference["kind"] in ("cross_table", "share", "multi_document")][:4]
  def reply(prompt):
    instance = next(i for i in instances if i.public["question"] in prompt)
    if "<tool_response>" not in prompt:
      return ('<tool_call>{"name": "open_document", "arguments": {"document": "%s", '
              '"table": 1}}</tool_call>' % instance.reference["source_files"][-1])
    return "<FINAL_ANSWER>unknown</FINAL_ANSWER>"
  _, scores = run_h0(domain, instances, reply)
  assert scores == [0.0] * len(instances)
  episodes = [json.loads(m) for m in sent_to_sandbox if json.loads(m).get("type") == "episode"]
  assert sorted(json.dumps(e["task"]) for e in episodes) == sorted(
      json.dumps(dict(i.public)) for i in instances)
  assert all(e["tool_names"] == ["open_document", "python", "search"] for e in episodes)
  for message in sent_to_sandbox:
    for instance in instances:
      assert instance.reference["answer"] not in message
    assert '"source_files"' not in message and '"difficulty"' not in message


def test_compact_h0_uses_tags_and_short_prompts():
  domain = tasks.get_domain("docqa", seed=3, num_issues=4, seed_harness="docqa_compact",
                            split_sizes={"weight": 20, "harness": 4, "validation": 4, "test": 8})
  instances = domain.splits()["test"][:2]
  def reply(prompt):
    instance = next(i for i in instances if i.public["question"] in prompt)
    if "<|im_start|>user\n" not in prompt.split(instance.public["question"], 1)[1]:
      return f"<open>{instance.reference['source_files'][0]} page=1</open>"
    return f"<FINAL_ANSWER>{instance.reference['answer']}</FINAL_ANSWER>"
  trajectories, scores = run_h0(domain, instances, reply)
  assert scores == [1.0, 1.0]
  for instance, trajectory in zip(instances, trajectories):
    [event] = trajectory.tool_events
    assert event.arguments == {"document": instance.reference["source_files"][0], "page": 1}
    assert max(len(call.prompt_token_ids) for call in trajectory.calls) < 1024
  with pytest.raises(ValueError, match="seed_harness='x'"):
    tasks.get_domain("docqa", seed_harness="x")


def test_h0_shows_tool_errors_to_the_model(domain):
  instances = domain.splits()["test"][:1]
  def reply(prompt):
    if "<tool_response>" not in prompt:
      return ('<tool_call>{"name": "open_document", "arguments": {"document": '
              '"fiscal_bulletin_1941_1", "page": 9}}</tool_call>')
    return "<FINAL_ANSWER>0</FINAL_ANSWER>"
  trajectories, _ = run_h0(domain, instances, reply)
  [event] = trajectories[0].tool_events
  assert "did you mean fiscal_bulletin_1941_01" in event.error
  second_prompt = TOKENIZER.decode(trajectories[0].calls[1].prompt_token_ids)
  assert "Error: tools.open_document() failed: ValueError" in second_prompt
  assert domain.metrics(instances, trajectories, [0.0])["tool_error_rate"] == 1.0
