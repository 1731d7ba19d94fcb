"""A byte-level tokenizer with special tokens, for tiny models on CPU.

Ids 0-255 are the UTF-8 bytes; the special tokens follow, in SPECIAL_TOKENS order:
256 <|pad|>, 257 <|bos|>, 258 <|endoftext|>, 259 <|im_start|>, 260 <|im_end|>,
261 <tool_call>, 262 </tool_call>, 263 <tool_response>, 264 </tool_response>,
265 <think>, 266 </think>. vocab_size = 267.
The chat format is the default one (whale_jax.tokenization.chat).
"""
import re

from whale_jax.tokenization import chat

SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                  "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                  "<think>", "</think>")
NUM_BYTES = 256


class ByteTokenizer:
  """UTF-8 bytes plus SPECIAL_TOKENS; encode() turns special-token strings into their ids."""

  def __init__(self):
    self.special_ids = {token: NUM_BYTES + i for i, token in enumerate(SPECIAL_TOKENS)}
    self.special_tokens = {i: token for token, i in self.special_ids.items()}
    self._special_pattern = re.compile("(" + "|".join(map(re.escape, SPECIAL_TOKENS)) + ")")
    self.vocab_size = NUM_BYTES + len(SPECIAL_TOKENS)
    self.pad_id = self.special_ids["<|pad|>"]
    self.bos_id = self.special_ids["<|bos|>"]
    self.eos_id = self.special_ids["<|endoftext|>"]
    self.eos_ids = (self.eos_id, self.special_ids[chat.TURN_END])
    self.chat_template = None

  def encode(self, text, add_bos=False):
    ids = [self.bos_id] if add_bos else []
    for piece in self._special_pattern.split(text):
      if piece in self.special_ids:
        ids.append(self.special_ids[piece])
      elif piece:
        ids.extend(piece.encode("utf-8"))
    return ids

  def decode(self, ids, skip_special_tokens=False):
    pieces, pending = [], bytearray()
    for i in ids:
      i = int(i)
      if i < NUM_BYTES:
        pending.append(i)
        continue
      pieces.append(pending.decode("utf-8", errors="replace"))
      pending = bytearray()
      if i in self.special_tokens and not skip_special_tokens:
        pieces.append(self.special_tokens[i])
      elif i not in self.special_tokens:
        raise ValueError(f"Token id {i} is outside the byte tokenizer's vocabulary "
                         f"(0..{self.vocab_size - 1}).")
    pieces.append(pending.decode("utf-8", errors="replace"))
    return "".join(pieces)

  def token_to_id(self, token):
    if token in self.special_ids:
      return self.special_ids[token]
    raw = token.encode("utf-8")
    return raw[0] if len(raw) == 1 else None

  def apply_chat_template(self, messages, add_generation_prompt=True, tools=None,
                          enable_thinking=None):
    return self.encode(chat.render(messages, add_generation_prompt, tools, enable_thinking))
