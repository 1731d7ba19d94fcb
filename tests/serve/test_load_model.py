"""whale_jax.serve.load_model: every kind of --model, and the errors that say what to pass."""
import pytest

from whale_jax import serve
from whale_jax.models import hf


@pytest.mark.slow  # initializes an 8-layer hybrid decoder op by op (~10 s idle, a minute loaded)
def test_preset_gets_random_weights_and_the_given_tokenizer():
  config, params, tokenizer, name = serve.load_model("preset:qwen3_5_tiny", "byte",
                                                     vocab_size=267, seed=3)
  assert (name, config.vocab_size, config.model_type) == ("qwen3_5_tiny", 267, "qwen3_5")
  assert tokenizer.vocab_size == 267
  assert params["embedding"].shape == (267, config.embed_dim)


def test_preset_errors_name_the_flag_to_pass():
  with pytest.raises(ValueError, match="--tokenizer"):
    serve.load_model("preset:qwen3_5_tiny")
  with pytest.raises(ValueError, match="--vocab_size=267"):
    serve.load_model("preset:qwen3_5_tiny", "byte")
  with pytest.raises(ValueError, match="Unknown model preset 'qwen9'"):
    serve.load_model("preset:qwen9", "byte")


def test_embedded_and_directory_load_the_checkpoint(tmp_path):
  config, _, tokenizer, name = serve.load_model("embedded")
  expected, _ = hf.load_hf(serve.EMBEDDED_SOLVER)
  assert name == "embedded" and config == expected and tokenizer.vocab_size == 2048
  _, _, _, name = serve.load_model(serve.EMBEDDED_SOLVER)
  assert name == "demo_solver"
  with pytest.raises(FileNotFoundError, match="--model=.*nowhere: no such directory"):
    serve.load_model(str(tmp_path / "nowhere"))
