"""Tokenizers stored as a sentencepiece .model file; chat uses the default format."""
import sentencepiece

from whale_jax.tokenization import chat


class SentencePieceTokenizer:
  """A sentencepiece model behind whale_jax's tokenizer interface.

  Special-token strings (e.g. <|im_end|>) become single ids only if the model defines them as
  user-defined symbols; otherwise they are encoded as ordinary text.
  """

  def __init__(self, path):
    self.processor = sentencepiece.SentencePieceProcessor(model_file=path)
    self.vocab_size = self.processor.get_piece_size()
    as_id = lambda i: i if i >= 0 else None
    self.bos_id = as_id(self.processor.bos_id())
    self.eos_id = as_id(self.processor.eos_id())
    self.pad_id = as_id(self.processor.pad_id())
    if self.pad_id is None:
      self.pad_id = self.eos_id if self.eos_id is not None else 0
    end_of_turn = self.token_to_id(chat.TURN_END)
    self.eos_ids = tuple(i for i in (self.eos_id, end_of_turn) if i is not None)
    self.chat_template = None

  def encode(self, text, add_bos=False):
    ids = self.processor.encode(text, out_type=int)
    return ([self.bos_id] if add_bos and self.bos_id is not None else []) + list(ids)

  def decode(self, ids, skip_special_tokens=False):
    ids = [int(i) for i in ids]
    if skip_special_tokens:
      ids = [i for i in ids if not self.processor.is_control(i)]
    return self.processor.decode(ids)

  def token_to_id(self, token):
    i = self.processor.piece_to_id(token)
    return None if i == self.processor.unk_id() and token != self.processor.id_to_piece(i) else i

  def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
    return self.encode(chat.render(messages, add_generation_prompt, tools))
