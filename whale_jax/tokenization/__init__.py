"""Tokenizers: a Hugging Face tokenizer directory, a sentencepiece .model, or "byte".

Every tokenizer offers the same interface:
  vocab_size, bos_id, eos_id, pad_id, eos_ids (ids that end a generation), chat_template,
  encode(text, add_bos=False) -> list[int]        (special-token strings become their ids)
  decode(ids, skip_special_tokens=False) -> str
  token_to_id(token) -> int | None
  apply_chat_template(messages, add_generation_prompt=True, tools=None) -> list[int]
Chat messages render through the checkpoint's chat template when it has one, and through the
default ChatML format (whale_jax.tokenization.chat) otherwise.

HFTokenizer (transformers) and SentencePieceTokenizer are imported on first use, so the
modules that only render chat messages start in a fraction of a second.
"""
import importlib
import os

from whale_jax.tokenization.byte import ByteTokenizer

_LAZY = {"HFTokenizer": "whale_jax.tokenization.hf_tokenizer",
         "SentencePieceTokenizer": "whale_jax.tokenization.sentencepiece_tokenizer"}


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'whale_jax.tokenization' has no attribute {name!r}")


def load_tokenizer(source):
  """Loads a tokenizer.

  Args:
    source: "byte"; a directory with tokenizer.json / tokenizer_config.json (Hugging Face) or
      with tokenizer.model (sentencepiece); or a path to a sentencepiece .model file.
  """
  if not isinstance(source, (str, os.PathLike)):
    raise TypeError(f"load_tokenizer takes a path or 'byte'; got {type(source).__name__}.")
  source = os.fspath(source)
  from whale_jax.tokenization.hf_tokenizer import HFTokenizer  # pylint: disable=g-import-not-at-top
  from whale_jax.tokenization.sentencepiece_tokenizer import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
  if source == "byte":
    return ByteTokenizer()
  if os.path.isdir(source):
    if (os.path.isfile(os.path.join(source, "tokenizer.json")) or
        os.path.isfile(os.path.join(source, "tokenizer_config.json"))):
      return HFTokenizer(source)
    if os.path.isfile(os.path.join(source, "tokenizer.model")):
      return SentencePieceTokenizer(os.path.join(source, "tokenizer.model"))
    raise FileNotFoundError(f"Tokenizer directory {source} has no tokenizer.json, "
                            "tokenizer_config.json or tokenizer.model.")
  if os.path.isfile(source) and source.endswith(".model"):
    return SentencePieceTokenizer(source)
  raise ValueError(f"load_tokenizer({source!r}): expected 'byte', a Hugging Face tokenizer "
                   "directory, or a sentencepiece .model file.")
