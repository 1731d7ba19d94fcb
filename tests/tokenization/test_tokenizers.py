"""Tokenizers: byte-level, Hugging Face directories and sentencepiece, with chat rendering."""
import json

import numpy as np
import pytest
import sentencepiece
import tokenizers
import transformers

from whale_jax.tokenization import byte
from whale_jax.tokenization import load_tokenizer

CORPUS = ["the cat sat on the mat", "Question: who wrote it?", "the answer is <answer>Ada</answer>",
          "search the corpus for facts", "unicode: café – 東京"] * 40
QWEN_LIKE_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the cat?"}]
RENDERED = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nthe cat?<|im_end|>\n"
            "<|im_start|>assistant\n")


def test_byte_tokenizer_round_trips_text_and_special_tokens():
  tokenizer = load_tokenizer("byte")
  text = "héllo <|im_end|> 東京<tool_call>x</tool_call>"
  ids = tokenizer.encode(text)
  assert ids[:2] == [ord("h"), 0xC3]  # "é" is two UTF-8 bytes
  assert byte.NUM_BYTES + byte.SPECIAL_TOKENS.index("<|im_end|>") in ids
  assert tokenizer.decode(ids) == text
  assert tokenizer.decode(ids, skip_special_tokens=True) == "héllo  東京x"
  assert tokenizer.vocab_size == 267
  assert tokenizer.eos_ids == (258, 260)


def test_byte_tokenizer_renders_default_chat_format():
  tokenizer = load_tokenizer("byte")
  ids = tokenizer.apply_chat_template(MESSAGES)
  assert ids == tokenizer.encode(RENDERED)
  assert ids[0] == tokenizer.token_to_id("<|im_start|>")
  with_tools = tokenizer.decode(tokenizer.apply_chat_template(
      MESSAGES[1:], tools=[{"name": "search"}], add_generation_prompt=False))
  assert with_tools == ('<|im_start|>system\n# Tools\n{"name": "search"}<|im_end|>\n'
                        "<|im_start|>user\nthe cat?<|im_end|>\n")


def test_byte_tokenizer_rejects_out_of_range_ids_and_bad_messages():
  tokenizer = load_tokenizer("byte")
  with pytest.raises(ValueError, match="Token id 999"):
    tokenizer.decode([999])
  with pytest.raises(ValueError, match=r"messages\[0\]\['role'\]='robot'"):
    tokenizer.apply_chat_template([{"role": "robot", "content": "hi"}])


def _save_bpe(directory, chat_template):
  bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
  bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=400, special_tokens=["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  bpe.train_from_iterator(CORPUS, trainer)
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
  if chat_template:
    fast.chat_template = chat_template
  fast.save_pretrained(directory)
  return bpe


def test_hf_directory_uses_its_chat_template(tmp_path):
  bpe = _save_bpe(tmp_path, QWEN_LIKE_TEMPLATE)
  tokenizer = load_tokenizer(str(tmp_path))
  assert tokenizer.apply_chat_template(MESSAGES) == bpe.encode(RENDERED).ids
  assert tokenizer.decode(tokenizer.encode("unicode: café – 東京")) == "unicode: café – 東京"
  assert set(tokenizer.eos_ids) == {bpe.token_to_id("<|endoftext|>"),
                                    bpe.token_to_id("<|im_end|>")}


def test_hf_directory_without_template_uses_default_format(tmp_path):
  bpe = _save_bpe(tmp_path, None)
  tokenizer = load_tokenizer(str(tmp_path))
  assert tokenizer.chat_template is None
  assert tokenizer.apply_chat_template(MESSAGES) == bpe.encode(RENDERED).ids


def test_bare_tokenizer_json_loads(tmp_path):
  bpe = _save_bpe(tmp_path / "full", None)
  (tmp_path / "bare").mkdir()
  bpe.save(str(tmp_path / "bare" / "tokenizer.json"))
  tokenizer = load_tokenizer(tmp_path / "bare")
  assert tokenizer.encode("the cat sat") == bpe.encode("the cat sat").ids


def test_sentencepiece_model(tmp_path):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(CORPUS))
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=40,
      user_defined_symbols=["<|im_start|>", "<|im_end|>"], minloglevel=2)
  tokenizer = load_tokenizer(str(tmp_path / "sp.model"))
  processor = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
  assert tokenizer.encode("the cat sat") == processor.encode("the cat sat")
  assert tokenizer.decode(tokenizer.encode("the cat sat")) == "the cat sat"
  assert tokenizer.apply_chat_template(MESSAGES) == processor.encode(RENDERED)
  assert processor.piece_to_id("<|im_end|>") in tokenizer.eos_ids


def test_unknown_source_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match="expected 'byte'"):
    load_tokenizer(str(tmp_path / "nope.bin"))
  with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
    load_tokenizer(str(tmp_path))


def test_trained_bpe_round_trips_and_keeps_special_tokens_whole(tmp_path):
  from whale_jax.tokenization import bpe_training  # pylint: disable=g-import-not-at-top
  bpe_training.train_bpe(CORPUS, str(tmp_path), vocab_size=320)
  tokenizer = load_tokenizer(str(tmp_path))
  text = "<|im_start|>user\nthe cat sat on the mat<|im_end|>\n"
  ids = tokenizer.encode(text)
  assert tokenizer.decode(ids) == text
  assert ids[0] == tokenizer.token_to_id("<|im_start|>")
  assert len(tokenizer.encode("the cat sat on the mat")) <= 6  # frequent words are single tokens
  assert tokenizer.token_to_id("<|im_end|>") in tokenizer.eos_ids
  assert tokenizer.pad_id == tokenizer.token_to_id("<|pad|>")
  with pytest.raises(ValueError, match="vocab_size=100 is too small"):
    bpe_training.train_bpe(CORPUS, str(tmp_path / "small"), vocab_size=100)
