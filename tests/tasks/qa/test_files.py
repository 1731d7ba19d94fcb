"""QA loaders on small files written in each dataset's real layout."""
import csv
import json

import pyarrow
import pyarrow.parquet
import pytest

from whale_jax.tasks.qa import files as qa_files


def write_jsonl(path, rows):
  path.write_text("".join(json.dumps(row) + "\n" for row in rows))
  return path


def test_search_r1_parquet(tmp_path):
  path = tmp_path / "nq_train.parquet"
  rows = [{"id": "train_0", "question": "who sang thriller",
           "golden_answers": ["Michael Jackson", "MJ"], "data_source": "nq",
           "prompt": [{"role": "user", "content": "Answer the given question... who sang"}],
           "ability": "fact-reasoning",
           "reward_model": {"ground_truth": {"target": ["Michael Jackson", "MJ"]},
                            "style": "rule"},
           "extra_info": {"index": 0, "split": "train"}}]
  pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
  assert qa_files.load_questions(path) == [
      {"id": "nq_train:train_0", "question": "who sang thriller",
       "golden_answers": ["Michael Jackson", "MJ"]}]


def test_flashrag_jsonl_bamboogle(tmp_path):
  path = write_jsonl(tmp_path / "bamboogle.jsonl", [
      {"id": "test_0", "question": "Who was president when the Eiffel Tower opened?",
       "golden_answers": ["Sadi Carnot"], "metadata": {}}])
  records = qa_files.load_questions(path, source="bamboogle")
  assert records == [{"id": "bamboogle:test_0",
                      "question": "Who was president when the Eiffel Tower opened?",
                      "golden_answers": ["Sadi Carnot"]}]


def test_hotpotqa_and_2wiki_json_lists(tmp_path):
  path = tmp_path / "hotpot_dev_distractor_v1.json"
  path.write_text(json.dumps([
      {"_id": "5a8b57f25542995d1e6f1371", "answer": "yes",
       "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
       "supporting_facts": [["Scott Derrickson", 0]], "context": [], "type": "comparison",
       "level": "hard"},
      {"_id": "abc", "answer": "Chief of Protocol", "question": "What position did she hold?",
       "supporting_facts": [], "context": [], "type": "bridge", "level": "medium"}]))
  records = qa_files.load_questions(path, source="hotpotqa")
  assert [r["id"] for r in records] == ["hotpotqa:5a8b57f25542995d1e6f1371", "hotpotqa:abc"]
  assert records[1]["golden_answers"] == ["Chief of Protocol"]


def test_musique_answer_aliases(tmp_path):
  path = write_jsonl(tmp_path / "musique_ans_v1.0_dev.jsonl", [
      {"id": "2hop__1", "paragraphs": [{"idx": 0, "title": "t", "paragraph_text": "p",
                                        "is_supporting": True}],
       "question": "Who is the spouse of the Green performer?",
       "question_decomposition": [], "answer": "Miquette Giraudy",
       "answer_aliases": ["Giraudy"], "answerable": True}])
  assert qa_files.load_questions(path)[0]["golden_answers"] == ["Miquette Giraudy", "Giraudy"]


def test_nq_open_answer_list(tmp_path):
  path = write_jsonl(tmp_path / "NQ-open.dev.jsonl", [
      {"question": "when was the last time anyone was on the moon",
       "answer": ["14 December 1972 UTC", "December 1972"]}])
  record = qa_files.load_questions(path)[0]
  assert record["id"] == "NQ-open.dev:0"
  assert record["golden_answers"] == ["14 December 1972 UTC", "December 1972"]


def test_triviaqa_original_json(tmp_path):
  path = tmp_path / "wikipedia-dev.json"
  path.write_text(json.dumps({"Data": [
      {"Answer": {"Aliases": ["Sunset Boulevard", "Sunset Blvd"], "MatchedWikiEntityName":
                  "Sunset Boulevard", "NormalizedAliases": ["sunset boulevard"],
                  "Value": "Sunset Boulevard", "Type": "WikipediaEntity"},
       "EntityPages": [], "Question": "Which Lloyd Webber musical premiered in 1993?",
       "QuestionId": "tc_33", "QuestionSource": "http://www.triviacountry.com/"}],
      "Domain": "Wikipedia", "Version": 1.0}))
  record = qa_files.load_questions(path, source="triviaqa")[0]
  assert record["id"] == "triviaqa:tc_33"
  assert record["golden_answers"][:2] == ["Sunset Boulevard", "Sunset Blvd"]


def test_triviaqa_hugging_face_parquet(tmp_path):
  path = tmp_path / "validation.parquet"
  rows = [{"question": "Who was the man behind The Chipmunks?", "question_id": "tc_2",
           "question_source": "http://www.triviacountry.com/",
           "answer": {"aliases": ["David Seville"], "normalized_aliases": ["david seville"],
                      "value": "David Seville", "normalized_value": "david seville",
                      "type": "WikipediaEntity"}}]
  pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
  record = qa_files.load_questions(path, source="triviaqa")[0]
  assert record["id"] == "triviaqa:tc_2"
  assert record["golden_answers"] == ["David Seville", "david seville"]


def test_popqa_tsv_with_json_answer_list(tmp_path):
  path = tmp_path / "popQA.tsv"
  with open(path, "w", newline="") as file:
    writer = csv.writer(file, delimiter="\t")
    writer.writerow(["id", "subj", "prop", "obj", "subj_id", "prop_id", "obj_id", "s_aliases",
                     "o_aliases", "s_uri", "o_uri", "s_wiki_title", "o_wiki_title", "s_pop",
                     "o_pop", "question", "possible_answers"])
    writer.writerow(["4222362", "George Rankin", "occupation", "politician", "1", "22", "3",
                     "[]", "[]", "u", "u", "George Rankin", "Politician", "142", "25692",
                     "What is George Rankin's occupation?",
                     json.dumps(["politician", "political leader"])])
  record = qa_files.load_questions(path)[0]
  assert record == {"id": "popQA:4222362", "question": "What is George Rankin's occupation?",
                    "golden_answers": ["politician", "political leader"]}


def test_bamboogle_csv(tmp_path):
  path = tmp_path / "Bamboogle.csv"
  path.write_text("Question,Answer\n\"Who was the first king of the country that won?\","
                  "Harald Fairhair\n")
  record = qa_files.load_questions(path)[0]
  assert record["golden_answers"] == ["Harald Fairhair"]
  assert record["question"].startswith("Who was the first king")


def test_row_without_answer_names_the_fields(tmp_path):
  path = write_jsonl(tmp_path / "broken.jsonl", [{"question": "q?", "label": "x"}])
  with pytest.raises(ValueError, match="golden_answers"):
    qa_files.load_questions(path)


def test_row_without_question_names_the_fields(tmp_path):
  path = write_jsonl(tmp_path / "broken.jsonl", [{"prompt": "q?", "answer": "x"}])
  with pytest.raises(ValueError, match="'question'"):
    qa_files.load_questions(path)


def test_corpus_title_text_and_wiki18_contents(tmp_path):
  plain = write_jsonl(tmp_path / "corpus.jsonl", [
      {"id": "0", "title": "Paris", "text": "Paris is the capital of France."}])
  wiki18 = write_jsonl(tmp_path / "wiki-18.jsonl", [
      {"id": "1", "contents": "\"Aaron\"\nAaron is a prophet.\nSecond line."}])
  assert qa_files.load_corpus(plain) == [
      {"id": "0", "title": "Paris", "text": "Paris is the capital of France."}]
  assert qa_files.load_corpus(wiki18) == [
      {"id": "1", "title": "Aaron", "text": "Aaron is a prophet.\nSecond line."}]
