"""The default chat format, for tokenizers whose checkpoint has no chat template.

It is ChatML, the format of Qwen models:

  <|im_start|>system
  {content}<|im_end|>
  <|im_start|>user
  {content}<|im_end|>
  <|im_start|>assistant
                                   <- generation starts here (add_generation_prompt=True)

A message is a dict with "role" (system, user, assistant or tool) and "content" (str).
When `tools` (a list of JSON-serializable function schemas) is given, a "# Tools" section
listing them is appended to the system message (one is created if there is none).
The assistant turn ends with <|im_end|>, which is therefore an end-of-generation token.

enable_thinking=False (the switch of Qwen3's template) follows the generation prompt with an
empty think block, "<think>\n\n</think>\n\n", so the model answers without thinking; True
or None leave the prompt as above.
"""
import json

ROLES = ("system", "user", "assistant", "tool")
TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"


def validate_messages(messages):
  """Raises a ValueError naming the bad message unless messages is a list of role/content."""
  if not isinstance(messages, (list, tuple)) or not messages:
    raise ValueError(f"messages must be a non-empty list of {{'role', 'content'}} dicts; got "
                     f"{type(messages).__name__}.")
  for i, message in enumerate(messages):
    if not isinstance(message, dict):
      raise ValueError(f"messages[{i}] is a {type(message).__name__}; each message must be a "
                       "dict with 'role' and 'content'.")
    if message.get("role") not in ROLES:
      raise ValueError(f"messages[{i}]['role']={message.get('role')!r}; allowed roles: "
                       f"{', '.join(ROLES)}.")
    if not isinstance(message.get("content"), str):
      raise ValueError(f"messages[{i}]['content'] must be a str; got "
                       f"{type(message.get('content')).__name__}.")


THINK_OFF = "<think>\n\n</think>\n\n"


def render(messages, add_generation_prompt=True, tools=None, enable_thinking=None):
  """The default template as text (special-token strings included)."""
  validate_messages(messages)
  messages = list(messages)
  if tools:
    section = "\n\n# Tools\n" + "\n".join(json.dumps(tool, sort_keys=True) for tool in tools)
    if messages[0]["role"] == "system":
      messages[0] = {"role": "system", "content": messages[0]["content"] + section}
    else:
      messages.insert(0, {"role": "system", "content": section.lstrip()})
  text = "".join(f"{TURN_START}{m['role']}\n{m['content']}{TURN_END}\n" for m in messages)
  if add_generation_prompt:
    text += f"{TURN_START}assistant\n"
    if enable_thinking is False:
      text += THINK_OFF
  return text
