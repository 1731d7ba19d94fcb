"""A domain is a folder: a package with a builder joins through one registry call."""
import sys
import textwrap

import pytest

from whale_jax import tasks
from whale_jax.harness import Harness
from whale_jax.harness import HarnessRuntime
from whale_jax.harness import ScriptedBackend
from whale_jax.sampling import SamplingParams
from whale_jax.tasks import registry
from whale_jax.tokenization import load_tokenizer

BUILDER = '''
"""Echo: repeat the word you are given."""
import os

from whale_jax.tasks import splits as splits_lib
from whale_jax.tasks.domain import Domain
from whale_jax.tasks.domain import Instance

HERE = os.path.dirname(os.path.abspath(__file__))
EDIT_CATALOGUE = ()


def echo_domain(seed=0):
  def make_splits():
    instances = [Instance(f"echo:{i}", {"word": f"w{seed}{i}"}, f"w{seed}{i}") for i in range(8)]
    return {name: instances[2 * k:2 * k + 2] for k, name in enumerate(splits_lib.SPLIT_NAMES)}

  with open(os.path.join(HERE, "seed_harnesses", "echo.py"), encoding="utf-8") as file:
    seed_harness = file.read()
  return Domain(name="echo", description="Repeat task['word'].", seed_harness=seed_harness,
                splits=make_splits,
                verify=lambda instance, answer, trajectory: float(answer == instance.reference),
                tools=lambda instance: {}, metrics=lambda *args: {}, allowed_imports=(),
                config={"seed": seed}, instructions=os.path.join(HERE, "instructions", "echo.md"))
'''
SEED_HARNESS = '''
def run(task, llm, tools):
  return llm.chat([{"role": "user", "content": "Repeat: " + task["word"]}]).strip()
'''


@pytest.fixture
def echo_folder(tmp_path, monkeypatch):
  """tmp_path/echo_task/: builder.py, seed_harnesses/echo.py, instructions/echo.md."""
  folder = tmp_path / "echo_task"
  (folder / "seed_harnesses").mkdir(parents=True)
  (folder / "instructions").mkdir()
  (folder / "__init__.py").write_text("")
  (folder / "builder.py").write_text(textwrap.dedent(BUILDER))
  (folder / "seed_harnesses" / "echo.py").write_text(SEED_HARNESS)
  (folder / "instructions" / "echo.md").write_text("# Echo (version echo-1)\nRepeat.\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setattr(registry, "BUILDERS", dict(registry.BUILDERS))
  yield folder
  for name in ("echo_task.builder", "echo_task"):
    sys.modules.pop(name, None)


def test_a_domain_folder_joins_with_one_registry_call_and_its_episodes_verify(echo_folder):
  registry.register("echo", "echo_task.builder:echo_domain")
  assert "echo" in tasks.domain_names()
  domain = tasks.get_domain("echo", seed=3)
  assert registry.edit_catalogue("echo") == domain.edit_catalogue == ()
  assert domain.instructions == str(echo_folder / "instructions" / "echo.md")
  instance = domain.splits()["harness"][0]
  tokenizer = load_tokenizer("byte")
  backend = ScriptedBackend(tokenizer, lambda prompt: prompt.rsplit("Repeat: ", 1)[1].split(
      "<", 1)[0].strip())
  with HarnessRuntime(backend, tokenizer, num_workers=1, timeout_seconds=30) as runtime:
    episode = tasks.make_episode(domain, instance, SamplingParams(max_tokens=16, seed=0))
    trajectory = runtime.submit(Harness(domain.seed_harness), episode).result()
  assert trajectory.outcome == "ok", trajectory.error
  assert trajectory.answer == instance.public["word"] == "w32"
  assert domain.verify(instance, trajectory.answer, trajectory) == 1.0
  assert domain.verify(instance, "wrong", trajectory) == 0.0


def test_register_refuses_what_it_cannot_use(echo_folder):
  with pytest.raises(ValueError, match="package.module:function"):
    registry.register("echo", "echo_task.builder")
  with pytest.raises(ModuleNotFoundError):
    registry.register("echo", "no_such_package.builder:build")
  with pytest.raises(TypeError, match="callable"):
    registry.register("echo", "echo_task.builder:HERE")
  with pytest.raises(ValueError, match="reasoning_gym:"):
    registry.register("reasoning_gym:echo", "echo_task.builder:echo_domain")
