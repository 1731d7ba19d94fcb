"""Tokenizers of Hugging Face checkpoints (tokenizer.json, chat template) via transformers."""
import os

import transformers

from whale_jax.tokenization import chat

# End-of-turn tokens of common chat formats; those in the vocabulary end a generation.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>",
                      "<end_of_turn>")


class HFTokenizer:
  """Wraps a transformers tokenizer behind whale_jax's tokenizer interface."""

  def __init__(self, path):
    if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
      self.tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    elif os.path.isfile(os.path.join(path, "tokenizer.json")):
      self.tokenizer = transformers.PreTrainedTokenizerFast(
          tokenizer_file=os.path.join(path, "tokenizer.json"))
    else:
      raise FileNotFoundError(f"{path} has neither tokenizer_config.json nor tokenizer.json.")
    self.vocab_size = len(self.tokenizer)
    self.bos_id = self.tokenizer.bos_token_id
    self.eos_id = self.tokenizer.eos_token_id
    self.pad_id = self.tokenizer.pad_token_id
    if self.pad_id is None:
      self.pad_id = self.eos_id if self.eos_id is not None else 0
    vocab = self.tokenizer.get_vocab()
    eos_ids = [self.eos_id] if self.eos_id is not None else []
    eos_ids += [vocab[token] for token in END_OF_TURN_TOKENS if token in vocab]
    self.eos_ids = tuple(dict.fromkeys(eos_ids))
    self.chat_template = self.tokenizer.chat_template

  def encode(self, text, add_bos=False):
    ids = self.tokenizer.encode(text, add_special_tokens=False)
    return ([self.bos_id] if add_bos and self.bos_id is not None else []) + list(ids)

  def decode(self, ids, skip_special_tokens=False):
    return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def token_to_id(self, token):
    return self.tokenizer.get_vocab().get(token)

  def apply_chat_template(self, messages, add_generation_prompt=True, tools=None, **kwargs):
    """Token ids of messages rendered by the checkpoint's template (or the default one)."""
    chat.validate_messages(messages)
    if self.chat_template is None:
      return self.encode(chat.render(messages, add_generation_prompt, tools,
                                     kwargs.get("enable_thinking")))
    rendered = self.tokenizer.apply_chat_template(
        list(messages), tools=tools, add_generation_prompt=add_generation_prompt,
        tokenize=True, **kwargs)
    if hasattr(rendered, "keys"):
      rendered = rendered["input_ids"]
    return [int(i) for i in rendered]
