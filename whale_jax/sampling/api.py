"""The generate API: what a caller asks for and what it gets back.

  from whale_jax.sampling import Sampler, SamplingParams
  sampler = Sampler(config, params, tokenizer=None)
  outs = sampler.generate([prompt_ids, ...], SamplingParams(max_tokens=64, seed=0))
  outs[i].token_ids, outs[i].logprobs, outs[i].text, outs[i].finish_reason

Any object with `generate(prompts, params) -> list[Completion]` and
`submit(prompt_ids, params) -> concurrent.futures.Future[list[Completion]]` is an LLM backend:
the harness runtime talks to backends only through these two methods and these types.
The Sampler's methods also take request keys (generate(..., request_keys=None),
submit(..., request_key=0)), which name the random streams (sampling/engine.py).
"""
import dataclasses
from typing import Protocol, Sequence

FINISH_REASONS = ("stop", "length")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """How to sample one request.

  Attributes:
    max_tokens: most new tokens to generate.
    temperature: 0 means greedy; otherwise logits are divided by it before sampling.
    top_p: nucleus sampling mass (1.0 = off).
    top_k: keep the k most likely tokens (0 = off).
    seed: the request's random seed; sample i of this request draws from a stream that
      depends only on (seed, request key, i), never on the other requests in the batch.
    n: samples per prompt; they share one prefill.
    ignore_eos: keep generating past end-of-sequence tokens.
    stop: stop strings; output ends right after the first one generated (it is included).
    stop_token_ids: extra token ids that end a generation (the token is included).
  """
  max_tokens: int = 64
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  seed: int = 0
  n: int = 1
  ignore_eos: bool = False
  stop: tuple[str, ...] = ()
  stop_token_ids: tuple[int, ...] = ()

  def __post_init__(self):
    if isinstance(self.stop, str):
      object.__setattr__(self, "stop", (self.stop,))
    object.__setattr__(self, "stop", tuple(self.stop))
    object.__setattr__(self, "stop_token_ids", tuple(int(i) for i in self.stop_token_ids))
    if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
      raise ValueError(f"SamplingParams.max_tokens={self.max_tokens!r} must be an int >= 1.")
    if not self.temperature >= 0:
      raise ValueError(f"SamplingParams.temperature={self.temperature!r} must be >= 0 "
                       "(0 = greedy).")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"SamplingParams.top_p={self.top_p!r} must be in (0, 1].")
    if not isinstance(self.top_k, int) or self.top_k < 0:
      raise ValueError(f"SamplingParams.top_k={self.top_k!r} must be an int >= 0 (0 = off).")
    if not isinstance(self.n, int) or self.n < 1:
      raise ValueError(f"SamplingParams.n={self.n!r} must be an int >= 1.")
    if any(not isinstance(s, str) or not s for s in self.stop):
      raise ValueError(f"SamplingParams.stop={self.stop!r} must be non-empty strings.")

  def replace(self, **changes) -> "SamplingParams":
    return dataclasses.replace(self, **changes)


@dataclasses.dataclass
class Completion:
  """One generated sample.

  Attributes:
    token_ids: generated ids, exactly as sampled (the stop token or stop string's last
      token included); what training uses.
    logprobs: log-probability of each token under the distribution it was sampled from
      (log-softmax of logits / temperature; temperature 1 when greedy).
    text: decoded token_ids (empty without a tokenizer); a view, never re-tokenized. A final
      end-of-sequence or stop token is left out of it; after a stop string it ends exactly
      with that string (sampling/stops.py states the rules).
    finish_reason: "stop" (end-of-sequence token, stop token or stop string) or "length".
    prompt_token_ids: the prompt this was generated from.
    stop_reason: what ended a "stop": the token id (end-of-sequence or stop token, which
      text leaves out) or the stop string (which text ends with); None for "length".
  """
  token_ids: list[int]
  logprobs: list[float]
  text: str = ""
  finish_reason: str = "length"
  prompt_token_ids: list[int] = dataclasses.field(default_factory=list)
  stop_reason: int | str | None = None


class LLMBackend(Protocol):
  """What the harness runtime and proposers call; the Sampler and test fakes implement it."""

  def generate(self, prompts: Sequence[Sequence[int]],
               params: SamplingParams) -> list[Completion]:
    """Completions for each prompt, params.n per prompt (prompt-major order)."""

  def submit(self, prompt_ids: Sequence[int], params: SamplingParams):
    """A concurrent.futures.Future resolving to list[Completion] (params.n of them)."""
