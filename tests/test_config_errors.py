"""Bad configs as a new user makes them: each is refused by `python -m whale_jax.main` in under
5 s of CPU time, in one line that names the key and the fix, with exit status 2, no traceback,
and no file written. The process is observed from outside (its stderr, its exit status, the
CPU seconds the kernel counted for it, the directory it was given). CPU time, not wall time:
on a loaded machine the wall time of the same work grows with the load, its CPU time does not.
"""
import os
import pathlib
import resource
import subprocess
import sys

import pytest

from tests.algorithms import tiny
from whale_jax.algorithms import config_check
from whale_jax.algorithms import experiment_config
from whale_jax.algorithms import sections
from whale_jax.models import presets

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOKE = "--config=configs/whale.py:smoke"
MAX_SECONDS = 5.0
TYPO_IN_FILE = """from configs import whale

def get_config(arg=""):
  config = whale.get_config("smoke")
  config.loop.sedd = 3
  return config
"""
WRONG_TYPE_IN_FILE = TYPO_IN_FILE.replace(
    "config.loop.sedd = 3", "config.loop = dict(config.loop.to_dict(), prompt_batch='4')")

MECHANISM_TYPO_IN_FILE = TYPO_IN_FILE.replace(
    "config.loop.sedd = 3",
    "config.search = dict(proposer='edit_library', mechanisms=('turn_budget', 'passage_lenght'))")

SPLIT_TYPO_IN_FILE = TYPO_IN_FILE.replace(
    "config.loop.sedd = 3", "config.domain.split_sizes = dict(weight=8, harness=4, "
    "valdation=4, test=4)")
PROPOSER_OPTIMIZER_IN_FILE = """from configs import harness_learning

def get_config(arg=""):
  config = harness_learning.get_config("smoke")
  config.harness_learning.proposer_training = dict(optimizer=dict(learning_rate="1e-5"))
  return config
"""
SEARCH_TYPO_IN_FILE = TYPO_IN_FILE.replace(
    "config.loop.sedd = 3", "config.search = dict(proposer='edit_library', seeed=1)")
MESH_TYPO_IN_FILE = TYPO_IN_FILE.replace("config.loop.sedd = 3", "config.mesh.num_device = 1")
MODEL_TYPO_IN_FILE = TYPO_IN_FILE.replace("config.loop.sedd = 3", "config.model.embed_dimm = 64")
HF_PARAM_DTYPE_IN_FILE = TYPO_IN_FILE.replace(
    "config.loop.sedd = 3", "config.model = dict(source='hf', path='checkpoints/none', "
    "dtype='bfloat16', param_dtype='float32')")
TEMPERATURE_IN_FILE = TYPO_IN_FILE.replace(
    "config.loop.sedd = 3", "config.training.rsft_temperature = 0.7")

CASES = {  # name: (arguments, files to write {name: text}, words the one line must hold)
    "typo_get_config_argument": (["--config=configs/whale.py:serachqa"], {},
                                 ["'serachqa'", "did you mean 'searchqa'", "smoke"]),
    "typo_key_in_file": (["--config={tmp}/typo.py"], {"typo.py": TYPO_IN_FILE},
                         ["config.loop.sedd", "did you mean 'seed'"]),
    "typo_flag": ([SMOKE, "--config.loop.sedd=3"], {},
                  ["--config.loop.sedd", "did you mean 'seed'"]),
    "wrong_type_in_file": (["--config={tmp}/wrong.py"], {"wrong.py": WRONG_TYPE_IN_FILE},
                           ["config.loop.prompt_batch='4'", "must be an int"]),
    "wrong_type_flag": ([SMOKE, "--config.loop.prompt_batch=four"], {},
                        ["config.loop.prompt_batch", "an int"]),
    "negative_batch": ([SMOKE, "--config.loop.prompt_batch=-4"], {},
                       ["config.loop.prompt_batch=-4", ">= 1"]),
    "unknown_recipe": ([SMOKE, "--config.recipe=whael"], {},
                       ["config.recipe='whael'", "did you mean 'whale'"]),
    "unknown_domain": ([SMOKE, "--config.domain.name=synthetic_qq"], {},
                       ["config.domain.name='synthetic_qq'", "did you mean 'synthetic_qa'"]),
    "unknown_proposer": ([SMOKE, "--config.search.proposer=edit_libary"], {},
                         ["config.search.proposer='edit_libary'",
                          "did you mean 'edit_library'"]),
    "unknown_edit_mechanism": (["--config={tmp}/mechanism.py"],
                               {"mechanism.py": MECHANISM_TYPO_IN_FILE},
                               ["config.search.mechanisms names 'passage_lenght'",
                                "passage_length"]),
    "missing_checkpoint": (["--config=configs/whale.py:math"], {},
                           ["config.model.path='checkpoints/Qwen/Qwen3.5-2B'",
                            "does not exist"]),
    "workdir_is_a_file": ([SMOKE], {"taken": "not a directory"}, ["--workdir=", "is a file"]),
    "typo_split_sizes": (["--config={tmp}/splits.py"], {"splits.py": SPLIT_TYPO_IN_FILE},
                         ["config.domain.split_sizes['valdation'] is not a split",
                          "did you mean 'validation'"]),
    "proposer_optimizer_type": (["--config={tmp}/proposer.py"],
                                {"proposer.py": PROPOSER_OPTIMIZER_IN_FILE},
                                ["config.harness_learning.proposer_training.optimizer."
                                 "learning_rate='1e-5' is str", "a number"]),
    "typo_search_key": (["--config={tmp}/search.py"], {"search.py": SEARCH_TYPO_IN_FILE},
                        ["config.search.seeed is not a known key", "did you mean 'seed'"]),
    "typo_mesh_key": (["--config={tmp}/mesh.py"], {"mesh.py": MESH_TYPO_IN_FILE},
                      ["config.mesh.num_device is not a known key",
                       "did you mean 'num_devices'"]),
    "typo_model_key": (["--config={tmp}/model.py"], {"model.py": MODEL_TYPO_IN_FILE},
                       ["config.model.embed_dimm is not a known key",
                        "did you mean 'embed_dim'"]),
    "hf_param_dtype_beside_dtype": (["--config={tmp}/hf.py"], {"hf.py": HF_PARAM_DTYPE_IN_FILE},
                                    ["config.model.param_dtype is set by config.model.dtype",
                                     "set dtype='float32'"]),
    "mismatched_temperatures": (["--config={tmp}/temperature.py"],
                                {"temperature.py": TEMPERATURE_IN_FILE},
                                ["config.training.rsft_temperature=0.7",
                                 "config.sampling.temperature=1.0",
                                 "temperature the rollouts are sampled at",
                                 "set both to the same value"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_config_is_refused_fast_in_one_line_leaving_nothing(name, tmp_path):
  arguments, files, words = CASES[name]
  for file_name, text in files.items():
    (tmp_path / file_name).write_text(text)
  workdir = tmp_path / ("taken" if name == "workdir_is_a_file" else "run")
  before = sorted(os.listdir(tmp_path))
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
  before_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  process = subprocess.run(
      [sys.executable, "-m", "whale_jax.main", *[a.format(tmp=tmp_path) for a in arguments],
       f"--workdir={workdir}"], cwd=ROOT, env=env, capture_output=True, text=True,
      timeout=60)
  after_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  seconds = ((after_usage.ru_utime + after_usage.ru_stime) -
             (before_usage.ru_utime + before_usage.ru_stime))
  lines = [line for line in process.stderr.splitlines() if line.strip()]
  assert process.returncode == 2, process.stderr[-2000:]
  assert len(lines) == 1 and lines[0].startswith("FATAL config error: "), process.stderr
  assert "Traceback" not in process.stderr
  for word in words:
    assert word in lines[0], (word, lines[0])
  print(f"{name}: {seconds:.2f} s of CPU time: {lines[0]}")  # shown with pytest -s
  assert seconds < MAX_SECONDS, f"{name} took {seconds:.1f} s of CPU time"
  assert sorted(os.listdir(tmp_path)) == before  # no workdir, nothing else written
  assert not os.path.isdir(tmp_path / "run")


def test_the_boundary_imports_no_jax():
  code = ("import sys; from whale_jax.algorithms import experiment_config; "
          "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))")
  process = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert process.stdout.strip() == "[]"


@pytest.mark.parametrize("key,value,words", [
    ("sampling.max_tokns", 8, ["config.sampling.max_tokns", "did you mean 'max_tokens'"]),
    ("sampling.top_p", 1.5, ["config.sampling", "top_p=1.5"]),
    ("training.optimizer.learnin_rate", 1e-3,
     ["config.training.optimizer.learnin_rate", "did you mean 'learning_rate'"]),
    ("training.sampler.max_slot", 8,
     ["config.training.sampler.max_slot", "did you mean 'max_slots'"]),
    ("runtime.num_worker", 2, ["config.runtime.num_worker", "did you mean 'num_workers'"]),
    ("domain.mate_in_two_fractio", 0.5,
     ["config.domain.mate_in_two_fractio", "did you mean 'mate_in_two_fraction'"]),
    ("model.num_layer", 2, ["config.model.num_layer", "did you mean 'num_layers'"]),
    ("model.attention", 5, ["config.model.attention=5 is int", "a string"]),
    ("model.source", "hff", ["config.model.source='hff'", "did you mean 'hf'"]),
    ("mesh.fsdp", "8", ["config.mesh.fsdp='8' is str", "an int"]),
    ("mesh.num_devices", -1, ["config.mesh.num_devices=-1 must be >= 0"]),
    ("search.seed", 1.5, ["config.search.seed=1.5 is float", "an int"]),
    ("search.model_path", "checkpoints/x", ["config.search.model_path is not a known key",
                                            "config.search takes"]),   # not edit_library's
])
def test_sections_of_every_layer_name_the_key(key, value, words, tmp_path):
  config = tiny.tiny_config("whale")
  config.domain.name = "chess"
  node = config
  *parents, leaf = key.split(".")
  for parent in parents:
    node = node[parent]
  node[leaf] = value
  _assert_refused_in_one_line(config, tmp_path, words)


def _assert_refused_in_one_line(config, tmp_path, words):
  """parse refuses config with a one-line ConfigError holding every word."""
  with pytest.raises(config_check.ConfigError) as caught:
    experiment_config.parse(config, str(tmp_path / "run"))
  message = str(caught.value)
  assert "\n" not in message
  for word in words:
    assert word in message, (word, message)


def test_the_sections_harness_learning_nests_name_their_own_key_path(tmp_path):
  """A teacher (config.search layout), the proposer model (config.model layout) and a training
  domain (config.domain layout) are read by the same classes, at their own paths."""
  for learning, words in (
      (dict(teachers=(dict(proposer="edit_library", sede=1),)),
       ["config.harness_learning.teachers[0].sede", "did you mean 'seed'"]),
      (dict(teachers=(dict(proposer="openai", model="m"),)),
       ["config.harness_learning.teachers[0].base_url is missing"]),
      (dict(proposer_model=dict(tiny.tiny_config().model.to_dict(), num_layer=2)),
       ["config.harness_learning.proposer_model.num_layer", "did you mean 'num_layers'"]),
      (dict(proposer_model=dict(tiny.tiny_config().model.to_dict(), num_heads=3)),
       ["config.harness_learning.proposer_model.num_heads=3", "num_kv_heads"]),
      (dict(grpo_domains=(dict(name="synthetic_qa", split_sizes=dict(tset=1)),)),
       ["config.harness_learning.grpo_domains[0].split_sizes['tset']", "did you mean 'test'"]),
      (dict(sft_domains=("chesss",)),
       ["config.harness_learning.sft_domains[0]='chesss'", "did you mean 'chess'"])):
    config = tiny.tiny_config("harness_learning")
    config.harness_learning = learning
    _assert_refused_in_one_line(config, tmp_path, words)


def test_the_typed_sections_hold_what_the_config_gave(tmp_path):
  config = tiny.tiny_config("whale")
  config.mesh = dict(fsdp=2, num_devices=2)
  config.search = dict(proposer="openai", base_url="http://127.0.0.1:8000/v1", model="m",
                       sampling=dict(max_tokens=64), context_tokens=900)
  experiment = experiment_config.parse(config, str(tmp_path / "run"))
  assert experiment.mesh == sections.MeshSection(data=-1, fsdp=2, tensor=1, num_devices=2)
  assert experiment.model.source == "random" and experiment.model.model_fields["num_layers"] == 2
  assert experiment.domain.name == config.domain.name
  assert experiment.domain.split_sizes == config.domain.split_sizes.to_dict()
  search = experiment.search
  assert (search.proposer, search.context_tokens, search.sampling) == ("openai", 900,
                                                                      {"max_tokens": 64})
  # The openai proposer's defaults (its client's), not the agentic proposer's.
  assert (search.api_key_env, search.max_retries) == ("OPENAI_API_KEY", 4)
  assert experiment.source["search"] == config.search.to_dict()   # config.json: as given


def test_a_judge_verifier_without_a_judge_section_is_refused(tmp_path):
  config = tiny.tiny_config("whale")
  config.domain.verifier = "judge"
  with pytest.raises(config_check.ConfigError, match=r"config\.domain\.judge"):
    experiment_config.parse(config, str(tmp_path / "run"))


def test_every_shipped_config_passes_the_check(tmp_path):
  from configs import demo, embedded_solver, harness_learning, whale  # pylint: disable=g-import-not-at-top
  for module, arguments in ((demo, ("", "smoke", "in_process", "openai")),
                            (whale, ("smoke", "smoke,adaptive", "math", "chess")),
                            (harness_learning, ("", "smoke", "qa")),
                            (embedded_solver, ("", "smoke", "narrow"))):
    for argument in arguments:
      config = module.get_config(argument)
      config.model = tiny.tiny_config().model.to_dict()  # the real checkpoints are not here
      if config.get("harness_learning", {}).get("proposer_model"):
        config.harness_learning.proposer_model = config.model.to_dict()
      experiment_config.parse(config, str(tmp_path / "run"))
  # "mixed" starts from another warm start's solver: here the shipped one.
  config = embedded_solver.get_config("mixed")
  config.warm_start.init_solver = presets.EMBEDDED_SOLVER
  experiment_config.parse(config, str(tmp_path / "run"))
  assert not os.listdir(tmp_path)
