"""Chess-puzzle seed harness (WHALE's h0): show the position, read one move, play it.

Each turn shows the side to move, the FEN, an ASCII board, the moves played so far, the
opponent's last move and every legal move as `- [uci] SAN=san`, and asks for one UCI move in
<move>...</move>. The move goes to tools.move, which answers "correct" (the opponent replied),
"solved", "wrong" (the puzzle is lost), or "illegal"/"malformed" (nothing happened). A reply
without exactly one move uses the format retry budget, a refused move the illegal-move budget;
both budgets refill after each accepted move. Returns the moves played, space-separated.
"""
import re

SYSTEM_PROMPT = ("You are solving a chess puzzle. Find the best move for the side to move; "
                 "the puzzle continues until the combination is complete.")
USER_PROMPT = ("{observation}\nReply with exactly one move in UCI notation inside "
               "<move>...</move>, for example <move>e2e4</move>.")
FORMAT_RETRY_BUDGET = 1
ILLEGAL_MOVE_RETRY_BUDGET = 1
MAX_TURNS = 9
MOVE = re.compile(r"<move>\s*([^<]*?)\s*</move>", re.IGNORECASE)


def format_observation(observation, turn_count, max_turns):
  legal = "\n".join(f"- [{move['uci']}] SAN={move['san']}"
                    for move in observation["legal_moves"])
  played = " ".join(observation.get("moves_played") or []) or "none"
  return (f"Turn {turn_count + 1} of at most {max_turns}.\n"
          f"Side to move: {observation['side_to_move']}\n"
          f"FEN: {observation['fen']}\n"
          f"Board (white pieces in capitals, rank 8 at the top):\n{observation['board']}\n"
          f"Your moves so far: {played}\n"
          f"Opponent's last move: {observation.get('last_opponent_move') or 'none'}\n"
          f"Legal moves:\n{legal}")


def parse_action(response):
  """The UCI move in <move>...</move>, "__no_move__", or "__ambiguous_multiple_moves__"."""
  moves = MOVE.findall(response)
  if not moves or not moves[-1]:
    return "__no_move__"
  if len(set(moves)) > 1:
    return "__ambiguous_multiple_moves__"
  return moves[0].strip()


def run(task, llm, tools):
  observation = task
  messages = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": USER_PROMPT.format(
                  observation=format_observation(observation, 0, MAX_TURNS))}]
  played = []
  format_retries = illegal_retries = 0
  for turn in range(MAX_TURNS):
    reply = llm.chat(messages)
    messages.append({"role": "assistant", "content": reply})
    action = parse_action(reply)
    if action.startswith("__"):
      if format_retries >= FORMAT_RETRY_BUDGET:
        break
      format_retries += 1
      messages.append({"role": "user", "content": "Your reply must contain exactly one move "
                       "inside <move>...</move>, in UCI notation such as <move>e2e4</move>."})
      continue
    result = tools.move(action)
    if result["status"] in ("illegal", "malformed"):
      if illegal_retries >= ILLEGAL_MOVE_RETRY_BUDGET:
        break
      illegal_retries += 1
      messages.append({"role": "user", "content": result["message"] + " Choose a move from "
                       "the legal moves list."})
      continue
    played.append(action)
    if result["status"] != "correct":
      break
    observation = result["observation"]
    format_retries = illegal_retries = 0
    messages.append({"role": "user", "content": USER_PROMPT.format(
        observation=format_observation(observation, turn + 1, MAX_TURNS))})
  return " ".join(played)
