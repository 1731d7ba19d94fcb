"""The Engine takes an EngineConfig or its fields as keywords, and EngineConfig imports no jax."""
import subprocess
import sys

import pytest

from tests.sampling import tiny_model
from whale_jax.sampling import engine
from whale_jax.sampling import engine_config


def test_engine_takes_an_engine_config_or_its_keywords():
  params = tiny_model.params(0)
  settings = engine_config.EngineConfig(max_slots=8, min_slots=2, steps_per_call=4)
  with engine.Engine(tiny_model.CONFIG, params, engine_config=settings) as from_config, \
      engine.Engine(tiny_model.CONFIG, params, **settings.keywords()) as from_keywords, \
      engine.Engine(tiny_model.CONFIG, params, engine_config=settings,
                    max_slots=4) as replaced:
    assert from_config.engine_config == from_keywords.engine_config == settings
    assert (from_config.max_slots, from_config.min_slots, from_config.steps_per_call) == (
        8, 2, 4)
    assert replaced.engine_config == engine_config.EngineConfig(max_slots=4, min_slots=2,
                                                                steps_per_call=4)
  with pytest.raises(TypeError, match="max_slot"):
    engine.Engine(tiny_model.CONFIG, params, max_slot=8)
  with pytest.raises(ValueError, match="steps_per_call=0 must be a positive int"):
    engine.Engine(tiny_model.CONFIG, params, steps_per_call=0)


def test_keywords_round_trip():
  config = engine_config.EngineConfig(max_slots=8, batch_sizes=(1, 8))
  assert engine_config.EngineConfig(**config.keywords()) == config


def test_importing_it_imports_no_jax():
  code = ("import sys; from whale_jax.sampling import engine_config, SamplingParams; "
          "print(any(m == 'jax' or m.startswith('jax.') for m in sys.modules))")
  output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout
  assert output.strip() == "False"
