"""Tool calls in a model's text: the Qwen3 and Qwen3.5 formats, parsed leniently.

  calls = parse_tool_calls(text)     # [ToolCall(name, arguments, error)], in order
  calls[0].error                     # "" when the call is well formed, else what is wrong

Formats (both inside <tool_call> ... </tool_call>; a missing closing tag at the end of the
text is tolerated, as a model cut at max_tokens leaves it open):
  Qwen3:    {"name": "read", "arguments": {"path": "task.md"}}
  Qwen3.5:  <function=read><parameter=path>task.md</parameter></function>
In the second format a parameter's value is JSON when it parses as JSON, else the text as it
is (one surrounding newline removed). Thinking (<think> ... </think>) is ignored. A call that
cannot be read keeps its text and an error message for the model; it is never dropped.
"""
import dataclasses
import json
import re

_THINKING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)\s*>(.*?)(?:</parameter>|(?=<parameter=)|$)",
                        re.DOTALL)
FORMAT_NOTE = ("Call a tool by writing, on its own, <tool_call>{\"name\": \"<tool>\", "
               "\"arguments\": {...}}</tool_call> (JSON), one call per reply.")


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """One call: its name and arguments, or the error that made it unreadable.

  Attributes:
    name: the tool's name ("" when it could not be read).
    arguments: the arguments (a dict; {} when unreadable).
    error: "" when well formed, else what is wrong (sent back to the model).
    text: the call as written.
    id: the endpoint's call id ("" for text formats).
  """
  name: str
  arguments: dict
  error: str = ""
  text: str = ""
  id: str = ""


def _strip_one_newline(value):
  if value.startswith("\n"):
    value = value[1:]
  if value.endswith("\n"):
    value = value[:-1]
  return value


def _parameter_value(raw):
  value = _strip_one_newline(raw)
  try:
    return json.loads(value)
  except ValueError:
    return value


def parse_call(body, call_id=""):
  """The ToolCall written as body (the text between the <tool_call> tags)."""
  text = body.strip()
  function = _FUNCTION.search(text)
  if function:
    arguments = {name: _parameter_value(value)
                 for name, value in _PARAMETER.findall(function.group(2))}
    return ToolCall(function.group(1), arguments, text=body, id=call_id)
  try:
    data = json.loads(text)
  except ValueError as error:
    return ToolCall("", {}, f"The tool call is not valid JSON ({error}); write "
                    "{\"name\": ..., \"arguments\": {...}}.", text=body, id=call_id)
  return from_name_and_arguments(data.get("name") if isinstance(data, dict) else None,
                                 data.get("arguments", {}) if isinstance(data, dict) else None,
                                 body, call_id)


def from_name_and_arguments(name, arguments, text="", call_id=""):
  """A ToolCall from a name and arguments (a dict, or a JSON string of one)."""
  if not isinstance(name, str) or not name:
    return ToolCall("", {}, "The tool call has no \"name\" string; write {\"name\": ..., "
                    "\"arguments\": {...}}.", text=text, id=call_id)
  if isinstance(arguments, str):
    try:
      arguments = json.loads(arguments) if arguments.strip() else {}
    except ValueError as error:
      return ToolCall(name, {}, f"The arguments of {name} are not valid JSON ({error}).",
                      text=text, id=call_id)
  if arguments is None:
    arguments = {}
  if not isinstance(arguments, dict):
    return ToolCall(name, {}, f"The arguments of {name} must be a JSON object; got "
                    f"{type(arguments).__name__}.", text=text, id=call_id)
  return ToolCall(name, arguments, text=text, id=call_id)


def parse_tool_calls(text):
  """Every <tool_call> in text (see the module docstring)."""
  text = _THINKING.sub("", text or "")
  return [parse_call(body) for body in _CALL.findall(text)]


def render_tool_call(name, arguments):
  """A call in the Qwen3 text format (how scripted policies and transcripts write it)."""
  return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
