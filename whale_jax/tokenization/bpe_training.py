"""Train a small byte-level BPE tokenizer on a text corpus and save it as a HF directory.

  train_bpe(texts, "tokenizer_dir", vocab_size=2048)
  tokenizer = load_tokenizer("tokenizer_dir")

For tiny models on a narrow domain: with a vocabulary trained on the domain's own text, each
frequent word (and each syllable of invented names) becomes one token, so episodes are short.
The chat special tokens (ChatML and tool-call markers) are single added tokens; the saved
directory has no chat template, so chats render in the default ChatML format.
"""
import tokenizers
import transformers

from whale_jax.tokenization import byte

END_OF_TEXT = "<|endoftext|>"
PAD = "<|pad|>"


def train_bpe(texts, directory, vocab_size=2048, special_tokens=byte.SPECIAL_TOKENS,
              min_frequency=2):
  """Trains byte-level BPE on texts (an iterable of str) and saves it to directory.

  Returns:
    the transformers tokenizer that was saved.
  """
  if vocab_size < 256 + len(special_tokens):
    raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs 256 byte "
                     f"tokens plus {len(special_tokens)} special tokens.")
  model = tokenizers.Tokenizer(tokenizers.models.BPE())
  model.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  model.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(special_tokens),
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
  model.train_from_iterator(texts, trainer)
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=model, eos_token=END_OF_TEXT if END_OF_TEXT in special_tokens else None,
      pad_token=PAD if PAD in special_tokens else None)
  fast.save_pretrained(directory)
  return fast
