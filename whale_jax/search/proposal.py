"""What a proposer returns, and the reply format every proposer speaks.

  proposals = proposer.propose(context, n)      # any proposer: model, HTTP endpoint, edit library
  proposal.kind          # "patch" (SEARCH/REPLACE blocks) or "program" (a whole new program)
  proposal.text          # what is applied to the incumbent (whale_jax.harness.patches)
  proposal.hypothesis    # the proposer's one-sentence reason to expect an improvement
  proposal.raw_output    # everything the proposer said, as it said it

A proposer is any object with `propose(context, n) -> list[Proposal]` and a `name`; context is
a whale_jax.search.context.ProposerContext. The reply format (REPLY_FORMAT) is what a model is
asked to write and what the edit library writes, so the library's replies are training targets
for a proposer model:

  HYPOTHESIS: one sentence: what fails now, the one mechanism that changes, why it helps.
  <<<<<<< SEARCH
  lines copied exactly from the current harness
  =======
  the lines to put there instead
  >>>>>>> REPLACE

or, instead of blocks, the whole new program in one ```python fence.
"""
import dataclasses
import re

from whale_jax.harness import patches
from whale_jax.sampling import openai_client

KINDS = ("patch", "program")
REPLY_FORMAT = """\
Reply in this format and nothing else:
HYPOTHESIS: <one sentence: what fails now, the one mechanism you change, why it helps>
then one or more SEARCH/REPLACE blocks against the current harness:
<<<<<<< SEARCH
<lines copied exactly from the current harness>
=======
<the lines to put there instead>
>>>>>>> REPLACE
or, instead of blocks, the complete new harness in a single ```python code fence."""
_HYPOTHESIS = re.compile(r"^\s*\**\s*hypothesis\s*\**\s*:\s*\**\s*(.+?)\s*$",
                         re.IGNORECASE | re.MULTILINE)
_THINKING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
MAX_HYPOTHESIS_CHARS = 500


@dataclasses.dataclass(frozen=True)
class Proposal:
  """One proposed change to the incumbent harness.

  Attributes:
    kind: "patch" or "program" (see the module docstring).
    text: the blocks or the program, as handed to whale_jax.harness.patches.apply_proposal.
    hypothesis: the stated reason to expect an improvement ("" when none was given).
    raw_output: the proposer's whole reply.
    prompt_tokens, completion_tokens: what the proposer spent (0 when unknown).
    proposer: the proposer's name.
    mechanism: the kind of change (edit library: e.g. "retrieval_topk"; "" for models).
    error: why the proposer produced no usable reply (e.g. the endpoint failed), else "".
    call_failed: the call itself failed (no reply: the endpoint failed after its retries, or
      the proposer raised). Such a Proposal records a failure, never a result: the search
      logs and counts it but neither archives nor saves it, so a resume asks again. A reply
      that came but is unusable (no blocks, a refusal) is a result: call_failed is False.
  """
  kind: str
  text: str
  hypothesis: str = ""
  raw_output: str = ""
  prompt_tokens: int = 0
  completion_tokens: int = 0
  proposer: str = ""
  mechanism: str = ""
  error: str = ""
  call_failed: bool = False

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"Proposal.kind={self.kind!r}; use one of {KINDS}.")

  def to_json(self):
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, data):
    return cls(**data)


def failed(error, proposer=""):
  """The Proposal that records why a proposer produced nothing usable; candidate_check refuses
  it with reason proposer_error, so it is archived like any other refused proposal."""
  return Proposal(kind="patch", text="", proposer=proposer, error=error)


def failed_call(error, proposer=""):
  """The Proposal standing for a call that got no reply (call_failed: logged and counted,
  never saved as a result, asked again on resume)."""
  return Proposal(kind="patch", text="", proposer=proposer, error=error, call_failed=True)


def safe_propose(proposer, context, n, indices=None):
  """Proposals number `indices` (default 0..n-1) of proposer for context, one per index.

  A proposer with propose_at(context, indices) is asked for exactly those; any other gets
  propose(context, n) and the indices are picked from its list (an index it did not reach
  is a failed call). When the proposer raises, every asked index is a failed_call() naming
  the exception, so that the caller records the failure and goes on. An endpoint that is
  down for good (openai_client.EndpointUnavailable) is no proposal's failure: it stops the
  run.
  """
  indices = list(range(n)) if indices is None else list(indices)
  name = getattr(proposer, "name", "")
  try:
    if callable(getattr(proposer, "propose_at", None)):
      proposals = list(proposer.propose_at(context, indices))
      if len(proposals) != len(indices):
        raise ValueError(f"propose_at returned {len(proposals)} proposals for "
                         f"{len(indices)} indices")
      return proposals
    proposals = list(proposer.propose(context, n))[:n]
  except openai_client.EndpointUnavailable:
    raise
  except Exception as error:  # pylint: disable=broad-except  # a proposer is untrusted code
    return [failed_call(f"The proposer raised {type(error).__name__}: {error}", name)
            for _ in indices]
  if indices == list(range(n)):
    return proposals  # a proposer may return fewer than n: those are all it proposed
  return [proposals[i] if i < len(proposals) else
          failed_call(f"The proposer returned {len(proposals)} of {n} proposals.", name)
          for i in indices]


def format_reply(hypothesis, text):
  """A reply in REPLY_FORMAT: the hypothesis line, then the blocks or fenced program."""
  return f"HYPOTHESIS: {' '.join(hypothesis.split())}\n{text}"


def parse_reply(reply, proposer="", prompt_tokens=0, completion_tokens=0):
  """The Proposal in a model's reply (thinking blocks are dropped before parsing).

  Kind is "patch" when the reply has SEARCH/REPLACE markers, "program" when it has no blocks
  but a program; a reply with neither is a "patch" that applies nothing (it is refused later,
  with the reason recorded).
  """
  text = _THINKING.sub("", reply)
  match = _HYPOTHESIS.search(text)
  hypothesis = match.group(1)[:MAX_HYPOTHESIS_CHARS] if match else ""
  kind = "patch"
  try:
    has_blocks = bool(patches.parse_blocks(text))
  except patches.PatchFormatError:
    has_blocks = True  # an open block: applying it reports the format error
  text = _without_hypothesis(text)
  if not has_blocks and patches.extract_program(text) is not None:
    kind = "program"
    text = patches.extract_program(text)
  return Proposal(kind=kind, text=text, hypothesis=hypothesis, raw_output=reply,
                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                  proposer=proposer)


def _without_hypothesis(text):
  return _HYPOTHESIS.sub("", text, count=1).strip() + "\n"
