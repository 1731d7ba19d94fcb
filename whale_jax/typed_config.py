"""The typed reader: plain values (a config section, a checkpoint's JSON) as annotated types.

  optimizer = typed_config.read(OptimizerConfig, {"learning_rate": 1e-5},
                                "config.training.optimizer")
  state = typed_config.read(LoopState, json_value, "loop", source="checkpoint")

read() rebuilds frozen dataclasses (nested ones too), list[T], tuple[T, ...], tuple[A, B],
dict[K, V] and T | None from dicts and lists, checks the type of every leaf of a config
(bool, int, float: an int is a number too, str), refuses a key the class lacks with a
did-you-mean, and names the full key path in every error
(config.harness_learning.proposer_training.optimizer.learning_rate). A class's own
__post_init__ errors are rewritten to the path the class was read at, so a section read in
two places (config.training and harness_learning.proposer_training) names the right one.

A section whose config layout is not its fields (model fields beside a model's source, a
domain builder's keyword arguments beside the domain's name) is a dataclass with a
from_config(value, key_path) classmethod: read() hands it the section, and it splits it, checks
its keys and builds the class with read_fields. In a union, a dict goes to the one dataclass
the union holds (str | DomainSection), so its own errors are the ones reported.

Errors are ConfigError (a ValueError) in one line. source="checkpoint" reads JSON the program
wrote itself: structure only (no leaf types), and its messages say the checkpoint was written
by another version of whale_jax.

This module imports nothing of the package (a floor module: every layer may import it).
"""
import dataclasses
import difflib
import re
import types
import typing


class ConfigError(ValueError):
  """A config value a run cannot start with; the message is one line that says what to do."""


def did_you_mean(word, allowed):
  """' (did you mean 'x'?)' for the closest allowed word, or ''."""
  close = difflib.get_close_matches(str(word), [str(a) for a in allowed], n=1, cutoff=0.6)
  return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(section, allowed, key_path):
  """Raises ConfigError for the first key of section that is not in allowed."""
  for key in section:
    if key not in allowed:
      raise ConfigError(f"{key_path}.{key} is not a known key{did_you_mean(key, allowed)}; "
                        f"{key_path} takes {', '.join(sorted(map(str, allowed)))}.")


def check_choice(value, allowed, key_path, what="value"):
  """Raises ConfigError unless value is one of allowed."""
  if value not in allowed:
    raise ConfigError(f"{key_path}={value!r} is not a known {what}"
                      f"{did_you_mean(value, allowed)}; use one of "
                      f"{', '.join(map(str, allowed))}.")


def at_least(key, value, minimum):
  """A ValueError naming key unless value >= minimum (for dataclasses' __post_init__)."""
  if value < minimum:
    raise ValueError(f"{key}={value!r} must be >= {minimum}.")


def one_of(key, value, allowed):
  """A ValueError naming key unless value is one of allowed."""
  if value not in allowed:
    raise ValueError(f"{key}={value!r}; use one of {', '.join(map(repr, allowed))}.")


def known_choice(key, value, allowed, what):
  """one_of with a did-you-mean (a ValueError, so that read() names the path read)."""
  try:
    check_choice(value, allowed, key, what)
  except ConfigError as error:
    raise ValueError(str(error)) from None


def one_line(error, key_path):
  """error's message in one line, naming key_path when it names no config key itself."""
  message = " ".join(str(error).split())
  return message if message.startswith(("config.", "--")) else f"{key_path}: {message}"


_SCALARS = {bool: "True or False", int: "an int", float: "a number", str: "a string"}


def describe(kind):
  """What a value of the annotated type kind is, in words ("an int", "a tuple of ...")."""
  origin, arguments = typing.get_origin(kind), typing.get_args(kind)
  if kind in _SCALARS:
    return _SCALARS[kind]
  if dataclasses.is_dataclass(kind):
    return f"a dict of {kind.__name__} fields"
  if origin in (types.UnionType, typing.Union):
    return " or ".join("None" if a is type(None) else describe(a) for a in arguments)
  if kind is tuple or origin is tuple:
    return "a tuple or list" + (f" of {describe(arguments[0])}" if arguments and (
        len(arguments) == 2 and arguments[1] is Ellipsis) else "")
  if kind is list or origin is list:
    return "a list"
  if kind is dict or origin is dict:
    return "a dict"
  return getattr(kind, "__name__", str(kind))


def _leaf_ok(value, kind):
  if kind is bool:
    return isinstance(value, bool)
  if kind is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if kind is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if kind is str:
    return isinstance(value, str)
  return True  # object, typing.Any and other types are taken as they are


def _rewrite(message, cls, path):
  """A __post_init__ message of cls as read at path: a leading field name, cls.field, or
  config.<some other path>.field gets path in front instead."""
  fields = "|".join(re.escape(f.name) for f in dataclasses.fields(cls))
  if message.startswith(path + ".") or message.startswith(path + "="):
    return message
  match = re.match(rf"^(?:config(?:\.\w+|\[\d+\])*\.|{re.escape(cls.__name__)}\.|)({fields})\b",
                   message)
  if match:
    return f"{path}.{message[match.start(1):]}"
  return one_line(message, path)


def _wrong_type(value, kind, path, source):
  if source == "checkpoint":
    return ValueError(f"The checkpoint's {path} is {value!r:.80} where a {kind.__name__} "
                      "object belongs; was it written by another version of whale_jax?")
  return ConfigError(f"{path}={value!r:.200} is {type(value).__name__}; it must be "
                     f"{describe(kind)}.")


def _read_dataclass(cls, value, path, source):
  if isinstance(value, cls):
    return value
  if not isinstance(value, dict) and not (hasattr(value, "keys") and source == "config"):
    raise _wrong_type(value, cls, path, source)
  value = dict(value)
  fields = {field.name: field for field in dataclasses.fields(cls) if field.init}
  unknown = [key for key in value if key not in fields]
  missing = sorted(name for name, field in fields.items() if name not in value and
                   field.default is dataclasses.MISSING and
                   field.default_factory is dataclasses.MISSING)
  if source == "checkpoint":
    if unknown or missing:
      problems = ([f"keys {sorted(unknown)} that {cls.__name__} lacks"] if unknown else []) + (
          [f"no {missing}"] if missing else [])
      raise ValueError(
          f"The checkpoint's {path} has {' and '.join(problems)} (a {cls.__name__} has "
          f"{sorted(fields)}); it was written by another version of whale_jax: resume it "
          "with that version, or start over in a new workdir.")
  else:
    check_keys(unknown, fields, path)
    if missing:
      raise ConfigError(f"{path}.{missing[0]} is missing; {cls.__name__} needs "
                        f"{', '.join(missing)}.")
  hints = typing.get_type_hints(cls)
  arguments = {name: read(hints[name], item, f"{path}.{name}", source)
               for name, item in value.items()}
  if source == "checkpoint":
    return cls(**arguments)
  try:
    return cls(**arguments)
  except (TypeError, ValueError) as error:
    if isinstance(error, ConfigError):
      raise
    raise ConfigError(_rewrite(" ".join(str(error).split()), cls, path)) from None


def read_fields(cls, value, path):
  """The dataclass cls of a config dict of its fields (what read() does for a class without
  from_config; a from_config calls it once it has the fields)."""
  return _read_dataclass(cls, value, path, "config")


def read(kind, value, path="config", source="config"):
  """value as the annotated type kind (module docstring); raises ConfigError (or, for
  source="checkpoint", ValueError) naming path."""
  origin, arguments = typing.get_origin(kind), typing.get_args(kind)
  if dataclasses.is_dataclass(kind):
    if source == "config" and hasattr(kind, "from_config") and not isinstance(value, kind):
      if not hasattr(value, "keys"):
        raise _wrong_type(value, kind, path, source)
      return kind.from_config(value.to_dict() if hasattr(value, "to_dict") else dict(value),
                              path)
    return _read_dataclass(kind, value, path, source)
  if origin in (types.UnionType, typing.Union):
    if value is None and type(None) in arguments:
      return None
    options = [argument for argument in arguments if argument is not type(None)]
    classes = [option for option in options if dataclasses.is_dataclass(option)]
    if source == "config" and len(classes) == 1 and hasattr(value, "keys"):
      return read(classes[0], value, path, source)
    if len(options) == 1 and options[0] in _SCALARS:
      if source == "config" and not _leaf_ok(value, options[0]):
        raise _wrong_type(value, kind, path, source)
      return value
    if len(options) == 1:
      return read(options[0], value, path, source)
    for option in options:  # the first that takes it
      try:
        return read(option, value, path, source)
      except (ConfigError, ValueError):
        continue
    raise _wrong_type(value, kind, path, source)
  if value is None and source == "checkpoint":
    return None
  if kind is tuple or origin is tuple or kind is list or origin is list:
    if not isinstance(value, (tuple, list)):
      if source == "checkpoint":
        return value
      raise _wrong_type(value, kind, path, source)
    if len(arguments) == 2 and arguments[1] is Ellipsis:
      items = [read(arguments[0], item, f"{path}[{i}]", source) for i, item in enumerate(value)]
    elif arguments and (origin is tuple):
      if len(arguments) != len(value) and source == "config":
        raise ConfigError(f"{path}={value!r} has {len(value)} items; it must have "
                          f"{len(arguments)}.")
      items = [read(argument, item, f"{path}[{i}]", source)
               for i, (argument, item) in enumerate(zip(arguments, value))]
    elif arguments:
      items = [read(arguments[0], item, f"{path}[{i}]", source) for i, item in enumerate(value)]
    else:
      items = list(value)
    return list(items) if (kind is list or origin is list) else tuple(items)
  if kind is dict or origin is dict:
    if not isinstance(value, dict) and not hasattr(value, "keys"):
      if source == "checkpoint":
        return value
      raise _wrong_type(value, kind, path, source)
    if not arguments:
      return dict(value)
    return {key: read(arguments[1], item, f"{path}[{key!r}]", source)
            for key, item in dict(value).items()}
  if source == "config" and not _leaf_ok(value, kind):
    raise _wrong_type(value, kind, path, source)
  return value
