"""EngineConfig is Engine's keyword arguments, by name and default, and imports no jax."""
import dataclasses
import inspect
import subprocess
import sys

from whale_jax.sampling import engine
from whale_jax.sampling import engine_config


def test_fields_and_defaults_are_the_engines_keyword_arguments():
  parameters = inspect.signature(engine.Engine.__init__).parameters
  expected = {name: p.default for name, p in parameters.items()
              if name not in ("self", "config", "params", "tokenizer", "mesh", "rules")}
  fields = {f.name: f.default for f in dataclasses.fields(engine_config.EngineConfig)}
  assert fields == expected


def test_keywords_round_trip():
  config = engine_config.EngineConfig(max_slots=8, batch_sizes=(1, 8))
  assert engine_config.EngineConfig(**config.keywords()) == config


def test_importing_it_imports_no_jax():
  code = ("import sys; from whale_jax.sampling import engine_config, SamplingParams; "
          "print(any(m == 'jax' or m.startswith('jax.') for m in sys.modules))")
  output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout
  assert output.strip() == "False"
