"""bench/accelerator_check.sh: its --smoke run on CPU writes the documented JSON with sane
numbers, and the FLOP and byte counts behind MFU and the bandwidth bound match hand counts
(bench/accelerator_measure.py)."""
import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import jax
import pytest

from whale_jax.models import ModelConfig
from whale_jax.models import decoder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The projections that multiply activations, by their name in the params tree.
MATMUL_LEAVES = ("query", "key", "value", "output", "gate", "up", "down")


@functools.cache
def _bench(name):
  """bench/<name>.py as a module (accelerator_measure imports accelerator_check by name)."""
  if name == "accelerator_measure":
    _bench("accelerator_check")
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def _hand_matmul_params(model):
  """Counted from the params tree itself: the projection leaves, plus the (tied) embedding
  once, as the unembedding."""
  shapes = jax.eval_shape(lambda: decoder.init_params(ModelConfig(**model), jax.random.key(0)))
  total = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(shapes):
    if path[-1].key in MATMUL_LEAVES:
      total += math.prod(leaf.shape)
  return total + math.prod(shapes["embedding"].shape)


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("accelerator_check") / "check.json")
  environment = dict(os.environ, PYTHON=sys.executable)
  start = time.time()
  result = subprocess.run(["bash", os.path.join(ROOT, "bench", "accelerator_check.sh"),
                           "--smoke", f"--out={out}"], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  with open(out, encoding="utf-8") as file:
    return json.load(file), time.time() - start


def test_smoke_run_writes_every_section(smoke_report):
  report, wall_seconds = smoke_report
  assert report["schema_version"] == 1 and report["smoke"] is True
  assert set(report["sections"]) == {"environment", "limits", "decode", "prefill", "train",
                                     "demo"}
  statuses = {name: entry["status"] for name, entry in report["sections"].items()}
  assert statuses == {"environment": "ok", "limits": "ok", "decode": "ok", "prefill": "ok",
                      "train": "ok", "demo": "skipped"}, report["sections"]
  assert report["complete"] is True
  assert 0 < report["wall_seconds"] <= wall_seconds
  for name, entry in report["sections"].items():
    if name != "demo":
      assert entry["seconds"] >= 0 and entry["load_average_before"] >= 0, name
  environment = report["sections"]["environment"]
  assert environment["platform"] == "cpu" and environment["jax_version"] == jax.__version__
  assert environment["num_params"] == ModelConfig(**environment["model_shape"]).num_params()


def test_smoke_run_numbers_are_sane(smoke_report):
  report, _ = smoke_report
  sections = report["sections"]
  limits = sections["limits"]
  assert limits["measured_bytes_per_second"] > 0 and limits["measured_flops_per_second"] > 0
  # CPU has no nominal figures: the bounds are the limits measured in the run.
  assert limits["bound_bytes_source"] == "measured" and limits["peak_flops_source"] == "measured"
  assert limits["bound_bytes_per_second"] == limits["measured_bytes_per_second"]
  rows = sections["decode"]["rows"]
  assert [row["batch_size"] for row in rows] == report["settings"]["decode_batch_sizes"]
  for row in rows:
    assert row["decode_tokens_per_second"] > 0 and row["generate_tokens_per_second"] > 0
    assert row["compilations_while_timed"] == 0, row
    assert row["decode_seconds_per_step"] * (row["new_tokens"] - 1) < row["generate_seconds"]
    bound = row["batch_size"] * limits["bound_bytes_per_second"] / row["bytes_per_step"]
    assert row["bound_tokens_per_second"] == pytest.approx(bound)
    # A tiny model's weights sit in the CPU's caches, so the measured-copy "bound" is not one
    # here: only its arithmetic is checked.
    assert row["fraction_of_bound"] == pytest.approx(row["decode_tokens_per_second"] / bound)
  for row in sections["prefill"]["rows"]:
    assert row["tokens_per_second"] == pytest.approx(
        row["batch_size"] * row["prompt_length"] / row["seconds"])
    assert row["mfu"] > 0
  train = sections["train"]
  assert train["tokens_per_step"] == train["batch_size"] * train["seq_len"]
  assert train["mfu"] == pytest.approx(
      train["flops_per_step"] / train["seconds_per_step"] / limits["peak_flops_per_second"])
  assert 0 < train["mfu"]
  vocab_size = sections["environment"]["model_shape"]["vocab_size"]
  assert math.isfinite(train["first_loss"]) and math.isfinite(train["last_loss"])
  assert abs(train["first_loss"] - math.log(vocab_size)) < 2, train  # near uniform at init


def test_train_flops_match_a_hand_count(smoke_report):
  report, _ = smoke_report
  model = report["sections"]["environment"]["model_shape"]
  train = report["sections"]["train"]
  matmul = _hand_matmul_params(model)
  assert train["matmul_params"] == matmul
  # PaLM: 6 FLOPs per matmul parameter per token (forward 2, backward 4) and, per layer and
  # query head, 12 x head_dim x T for the score and value products.
  attention = 12 * model["num_layers"] * model["num_heads"] * model["head_dim"] * train["seq_len"]
  assert train["flops_per_step"] == train["tokens_per_step"] * (6 * matmul + attention)


def test_qwen3_0_6b_shape_counts():
  check = _bench("accelerator_measure")
  model = _bench("accelerator_check").MODELS["qwen3_0_6b"]
  config = ModelConfig(**model)
  # Qwen3-0.6B's model card: 0.6B parameters, 0.44B without the embedding.
  assert config.num_params() == 596_049_920
  assert config.num_params() - 151_936 * 1024 == 440_467_456
  layer = 1024 * 16 * 128 * 2 + 1024 * 8 * 128 * 2 + 3 * 1024 * 3072
  assert check.matmul_params(model) == 28 * layer + 151_936 * 1024 == _hand_matmul_params(model)
  assert check.train_flops_per_token(model, 2048) == 6 * (28 * layer + 151_936 * 1024) + (
      12 * 28 * 16 * 128 * 2048)
  # Batch 64 at a mean context of 192 tokens: bfloat16 weights plus keys and values of 28
  # layers x 8 heads x 128 dims per token.
  assert check.decode_bytes_per_step(596_049_920, model, 64, 192, 2) == (
      2 * 596_049_920 + 64 * 192 * 2 * 28 * 8 * 128 * 2)


def test_a_section_records_its_error_or_its_skip(tmp_path):
  check = _bench("accelerator_check")
  path = str(tmp_path / "report.json")
  report = check.Report(path, {"started_unix": time.time(), "sections": {}})

  def fails(_):
    raise ValueError("no such device")

  report.section("broken", fails, 0.0, time.time() + 60, time.time() + 60)
  report.section("late", lambda _: {"never": True}, 30.0, time.time() + 5, time.time() + 5)
  with open(path, encoding="utf-8") as file:
    sections = json.load(file)["sections"]
  assert sections["broken"]["status"] == "error"
  assert "ValueError: no such device" in sections["broken"]["error"]
  assert sections["late"]["status"] == "skipped" and "never" not in sections["late"]
