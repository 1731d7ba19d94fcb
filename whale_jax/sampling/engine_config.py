"""EngineConfig: the generation engine's settings (= config.training.sampler keys), a frozen
dataclass that imports no jax, so the config boundary reads and checks it before jax starts.

  engine_config = EngineConfig(max_slots=32, steps_per_call=16)
  Sampler(model_config, params, tokenizer=tokenizer, mesh=mesh, engine_config=engine_config)
  Sampler(model_config, params, max_slots=32, steps_per_call=16)   # the same, as keywords

engine.Engine's docstring says what each field does; programs.programs reads the fields that
shape the compiled programs.
"""
import dataclasses

PREFIX_BLOCK_SIZES = (1, 2, 4, 8, 16)  # each divides every cache length bucket


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """engine.Engine's settings: everything but the model, params, tokenizer, mesh and rules."""
  max_slots: int = 64
  min_slots: int = 1
  steps_per_call: int = 64
  max_cache_length: int | None = None
  max_prefill_tokens: int = 8192
  num_stop_ids: int = 16
  unrolled: bool | None = None
  prefix_cache_bytes: int | None = None
  prefix_block_size: int = 16
  prefix_cache_completions: bool = False
  share_identical_prompts: bool = True
  batch_sizes: tuple[int, ...] | None = None
  cache_lengths: tuple[int, ...] | None = None

  def __post_init__(self):
    for name in ("max_slots", "min_slots", "steps_per_call", "max_prefill_tokens",
                 "num_stop_ids"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int.")
    if self.prefix_block_size not in PREFIX_BLOCK_SIZES:
      raise ValueError(f"prefix_block_size={self.prefix_block_size!r} must be one of "
                       f"{PREFIX_BLOCK_SIZES} (it must divide every cache length bucket).")
    if self.prefix_cache_bytes is not None and self.prefix_cache_bytes < 0:
      raise ValueError(f"prefix_cache_bytes={self.prefix_cache_bytes!r} must be an int >= 0 "
                       "(0 = no prefix cache) or None for the engine's default.")

  def keywords(self):
    """The fields as keyword arguments (Sampler(..., **keywords()) is
    Sampler(..., engine_config=self))."""
    return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
