"""Data files in the published layouts the paper configs read, written at the configs' own
relative paths under a directory (the run's working directory), and a served model.

  write_searchqa(root)    Search-R1 train parquet, WHALE's D_harness parquet, FlashRAG test
                          jsonl (7 sets), wiki-18 corpus
  write_math(root)        DAPO-Math-17k parquet, AIME 2024 / 2025 jsonl
  write_chess(root)       a Lichess puzzle CSV (legal lines from seeded random positions)
  write_docqa(root)       OfficeQA's CSV and a page-level Treasury Bulletin corpus folder
  write_toolflow(root)    AutomationBench task records (HR, Marketing, Finance) in one jsonl
  served = Served(args)   a `python -m whale_jax.serve` process on 127.0.0.1, any free port
"""
import csv
import json
import os
import random
import subprocess
import sys
import threading

import chess
import httpx
import pyarrow
import pyarrow.parquet

from whale_jax.tasks.math import files as math_files

# (question, answer, passage title, passage text): one fact per made-up city.
_SYLLABLES = ("var", "nol", "que", "tir", "bre", "aln", "pel", "cor", "dun", "ebb", "fan", "gor")
FACTS = [(f"Which river flows through {city}?", river, city,
          f"{city} is a city on the {river} river, founded long ago.")
         for city, river in ((f"{a.title()}{b}holm", f"{b.title()}{a}a")
                             for a in _SYLLABLES[:6] for b in _SYLLABLES[6:])]
SEARCHQA_TEST_FILES = ("nq/test.jsonl", "triviaqa/test.jsonl", "popqa/test.jsonl",
                       "hotpotqa/dev.jsonl", "2wikimultihopqa/dev.jsonl", "musique/dev.jsonl",
                       "bamboogle/test.jsonl")


def _write_jsonl(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as file:
    file.writelines(json.dumps(row) + "\n" for row in rows)


def _write_parquet(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)


def write_searchqa(root, train=14, test_per_file=2):
  """The files of configs/whale.py:searchqa (tiny); returns {test file stem: [question ids]}."""
  facts = list(FACTS)
  rows = [{"id": f"train_{i}", "question": q, "golden_answers": [a], "data_source": "nq",
           "prompt": [{"role": "user", "content": f"Answer the given question. {q}"}],
           "ability": "fact-reasoning",
           "reward_model": {"ground_truth": {"target": [a]}, "style": "rule"},
           "extra_info": {"index": i, "split": "train"}}
          for i, (q, a, _, _) in enumerate(facts[:train])]
  _write_parquet(os.path.join(root, "data/searchR1/train.parquet"), rows)
  rest = facts[train:]
  for index, name in enumerate(SEARCHQA_TEST_FILES):
    chunk = rest[index * test_per_file:(index + 1) * test_per_file]
    _write_jsonl(os.path.join(root, "data/flashrag", name),
                 [{"id": f"{name.split('/')[0]}_{j}", "question": q, "golden_answers": [a]}
                  for j, (q, a, _, _) in enumerate(chunk)])
  # WHALE's D_harness file (Search-R1's layout): 4 questions after the test sets'.
  harness = rest[len(SEARCHQA_TEST_FILES) * test_per_file:][:4]
  _write_parquet(os.path.join(root, "data/searchR1_processed/mh_dist_align_256.parquet"),
                 [{"id": f"mh_{i}", "question": q, "golden_answers": [a], "data_source": "nq"}
                  for i, (q, a, _, _) in enumerate(harness)])
  _write_jsonl(os.path.join(root, "data/searchR1/wiki-18.jsonl"),
               [{"id": str(i), "contents": f'"{title}"\n{text}'}
                for i, (_, _, title, text) in enumerate(facts)])
  return {name: [f"{name.split('/')[0]}_{j}" for j in range(test_per_file)]
          for name in SEARCHQA_TEST_FILES}


def write_math(root, train=8):
  rows = [{"data_source": "math_dapo",
           "prompt": [{"content": f"{math_files.DAPO_PREFIX}What is {i} + {i + 3}?"
                                  f"{math_files.DAPO_SUFFIX}", "role": "user"}],
           "ability": "MATH", "reward_model": {"ground_truth": str(2 * i + 3),
                                               "style": "rule-lean"},
           "extra_info": {"index": f"uuid-{i}"}} for i in range(train)]
  _write_parquet(os.path.join(root, "data/dapo_math_17k.parquet"), rows)
  _write_jsonl(os.path.join(root, "data/aime_2024.jsonl"),
               [{"id": 60 + i, "problem": f"Find {i} times 7.", "answer": str(7 * i),
                 "url": "https://example.org", "year": 2024} for i in range(1, 3)])
  _write_jsonl(os.path.join(root, "data/aime_2025.jsonl"),
               [{"question": f"Find {i} squared.", "answer": str(i * i)}
                for i in range(3, 5)])


def write_chess(root, count=16, seed=0):
  """A Lichess puzzle CSV (header, 10 fields): seeded random positions, each with a legal
  trigger move and a legal 3-move line after it."""
  rng = random.Random(seed)
  rows, seen = [], set()
  while len(rows) < count:
    board = chess.Board()
    for _ in range(rng.randrange(6, 30)):
      moves = list(board.legal_moves)
      if not moves:
        break
      board.push(rng.choice(moves))
    start, line = board.fen(), []
    for _ in range(4):
      moves = list(board.legal_moves)
      if not moves:
        break
      move = rng.choice(moves)
      line.append(move.uci())
      board.push(move)
    if len(line) < 4 or start in seen:
      continue
    seen.add(start)
    rows.append(f"p{len(rows):04d},{start},{' '.join(line)},{1200 + 10 * len(rows)},80,90,"
                f"100,middlegame short,https://lichess.org/x{len(rows)},")
  path = os.path.join(root, "data/lichess_db_puzzle.csv")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as file:
    file.write("PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,"
               "GameUrl,OpeningTags\n" + "\n".join(rows) + "\n")


def write_docqa(root, count=10):
  """OfficeQA's files: officeqa_full.csv (uid, question, answer, difficulty, source_files)
  and a page-level corpus folder of Treasury Bulletin transforms ("--- PAGE n ---")."""
  corpus = os.path.join(root, "data/officeqa/treasury_bulletins_parsed/transformed_page_level")
  os.makedirs(corpus, exist_ok=True)
  rows = []
  for i in range(count):
    year, name = 1940 + i, f"treasury_bulletin_{1941 + i}_01"
    with open(os.path.join(corpus, name + ".txt"), "w", encoding="utf-8") as file:
      file.write(f"--- PAGE 1 ---\n\nTreasury Bulletin, January {1941 + i}\n\n--- PAGE 2 "
                 "---\n\nTable FD-1. Budget expenditures\n(In millions of dollars)\n\n"
                 "| Fiscal year | National defense | Total |\n| --- | --- | --- |\n"
                 f"| {year} | {2000 + 37 * i:,} | {9000 + 55 * i:,} |\n")
    rows.append([f"UID{i:04d}", f"National defense expenditures in fiscal year {year}?",
                 f"{2000 + 37 * i:,}", "easy" if i % 2 else "hard", name + ".txt"])
  path = os.path.join(root, "data/officeqa/officeqa_full.csv")
  with open(path, "w", newline="", encoding="utf-8") as file:
    writer = csv.writer(file)
    writer.writerow(["uid", "question", "answer", "difficulty", "source_files"])
    writer.writerows(rows)


TOOLFLOW_DOMAINS = ("hr", "marketing", "finance")


def write_toolflow(root, per_domain=3):
  """data/automationbench/tasks.jsonl: AutomationBench records ("<domain>.<task>" name,
  example_id, prompt, system prompt, declared tools, seeded app state keyed by app, typed
  assertions), per_domain of each of TOOLFLOW_DOMAINS; each asks for an email to a named
  person and a tracker row marked done, and forbids mail to a second person."""
  records = []
  for domain in TOOLFLOW_DOMAINS:
    for i in range(per_domain):
      who, other = f"Ada {domain.title()}{i}", f"Bo {domain.title()}{i}"
      address = f"ada.{domain}{i}@company.example.com"
      records.append({
          "name": f"{domain}.follow_up_{i}", "example_id": 7000 + len(records),
          "prompt": f"Read the request from {who}, email {address} that the item is "
                    "approved, and mark their tracker row Done.",
          "system_prompt": "You are a workflow automation agent.",
          "tools": ["find_email", "send_email", "sheets_update_row"],
          "initial_state": {
              "gmail": {"messages": [
                  {"id": f"msg_{i}", "thread_id": f"th_{i}", "from_": address,
                   "to": "ops@company.example.com", "subject": f"Request {i}",
                   "body_plain": f"Please approve item {i}.", "labels": ["INBOX"]}]},
              "google_sheets": {"spreadsheets": [
                  {"id": f"ss_{domain}", "title": "Tracker", "worksheets": [
                      {"id": "ws_1", "title": "Requests", "columns": ["Name", "Status"],
                       "rows": [{"row_id": 1, "cells": {"Name": who, "Status": "Open"}},
                                [other, "Open"]]}]}]},
          },
          "assertions": [
              {"type": "gmail_message_sent_to_with_body_contains", "to": address,
               "body_contains": "approved"},
              {"type": "google_sheets_row_updated", "spreadsheet_id": f"ss_{domain}",
               "row_id": 1, "cell_contains": {"Status": "Done"}},
              {"type": "gmail_message_not_sent_to",
               "to": f"bo.{domain}{i}@company.example.com"},
          ]})
  _write_jsonl(os.path.join(root, "data/automationbench/tasks.jsonl"), records)
  return records


class Served:
  """A `python -m whale_jax.serve` process on 127.0.0.1 (a free port); stop() ends it."""

  def __init__(self, args, timeout=300):
    self.args = list(args)
    self.process, self.url, self.lines = None, None, []
    self.start(timeout)

  def start(self, timeout=300, port=0):
    self.lines = []
    self.process = subprocess.Popen(
        [sys.executable, "-m", "whale_jax.serve", f"--port={port}", *self.args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    found = threading.Event()

    def read():
      for line in self.process.stdout:
        self.lines.append(line)
        if "http://" in line:
          found.set()
    threading.Thread(target=read, daemon=True).start()
    if not found.wait(timeout):
      self.stop()
      raise RuntimeError("whale_jax.serve did not start:\n" + "".join(self.lines))
    self.url = next(line for line in self.lines if "http://" in line).split(" on ")[-1].strip()
    return self.url

  @property
  def port(self):
    return int(self.url.rsplit(":", 1)[1].split("/")[0])

  def health(self):
    return httpx.get(self.url.removesuffix("/v1") + "/health", timeout=30).json()

  def stop(self):
    if self.process is None:
      return
    self.process.kill()
    self.process.wait()
    self.process = None
