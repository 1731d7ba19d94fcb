"""RuntimeConfig: the harness runtime's settings (= config.runtime keys), a frozen dataclass
that imports no jax, so the config boundary reads and checks it before jax starts.

  runtime = HarnessRuntime(backend, tokenizer, **runtime_config.keywords(domain.allowed_imports))

Field names, defaults and meanings are runtime.HarnessRuntime's keyword arguments (its
docstring says what each does), but allowed_imports, whose default None means the domain's;
tests/harness/test_runtime_config.py holds the two to the same names and defaults.
"""
import dataclasses

MIN_MEMORY_BYTES = 128 << 20  # what a worker's Python process needs (runtime.py)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
  """runtime.HarnessRuntime's keyword arguments but the backend and tokenizer."""
  num_workers: int = 4
  timeout_seconds: float = 60.0
  memory_bytes: int = 1 << 30
  cpu_seconds: int | None = None
  file_size_bytes: int = 16 << 20
  max_open_files: int = 64
  max_calls: int = 256
  max_answer_chars: int = 100_000
  max_stdout_chars: int = 20_000
  max_message_bytes: int = 16 << 20
  max_source_chars: int = 200_000
  allowed_imports: tuple[str, ...] | None = None  # None = the domain's allowed imports
  start_timeout_seconds: float = 60.0
  backend_timeout_seconds: float | None = None
  allow_weak_sandbox: bool = False
  max_episode_tokens: int = 0
  enable_thinking: bool | None = None
  bwrap_path: str = ""

  def __post_init__(self):
    if self.num_workers < 1:
      raise ValueError(f"num_workers={self.num_workers!r} must be an int >= 1.")
    if not self.timeout_seconds > 0:
      raise ValueError(f"timeout_seconds={self.timeout_seconds!r} must be > 0.")
    if self.memory_bytes < MIN_MEMORY_BYTES:
      raise ValueError(f"memory_bytes={self.memory_bytes} is below the {MIN_MEMORY_BYTES} "
                       "bytes a Python process needs; use at least that.")
    if self.max_episode_tokens < 0:
      raise ValueError(f"max_episode_tokens={self.max_episode_tokens!r} must be an int >= 0: "
                       "completion tokens per episode over all its llm calls (0 = no budget; "
                       "the papers use 8192 or 16384).")

  def keywords(self, default_allowed_imports):
    """HarnessRuntime's keyword arguments; allowed_imports defaults to the given ones."""
    keywords = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
    if keywords["allowed_imports"] is None:
      keywords["allowed_imports"] = default_allowed_imports
    return keywords
