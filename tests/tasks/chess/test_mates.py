"""Every generated puzzle's key move is checked unique by an independent full search."""
import chess
import pytest

from whale_jax.tasks.chess import mates as chess_mates
from whale_jax.tasks.chess import puzzles as chess_puzzles


def forced_mate(board, moves_left):
  """True if the side to move can force checkmate within moves_left of its own moves."""
  if moves_left == 0:
    return False
  for move in board.legal_moves:
    after = board.copy(stack=False)
    after.push(move)
    if after.is_checkmate():
      return True
    if moves_left > 1 and not after.is_game_over() and all(
        forced_mate(_pushed(after, reply), moves_left - 1) for reply in after.legal_moves):
      return True
  return False


def _pushed(board, move):
  board = board.copy(stack=False)
  board.push(move)
  return board


def winning_first_moves(board, mate_in):
  """The first moves that force mate within mate_in moves."""
  winners = []
  for move in board.legal_moves:
    after = _pushed(board, move)
    if after.is_checkmate() or (mate_in > 1 and not after.is_game_over() and all(
        forced_mate(_pushed(after, reply), mate_in - 1) for reply in after.legal_moves)):
      winners.append(move.uci())
  return winners


@pytest.mark.parametrize("mate_in, count", [(1, 30), (2, 8)])
def test_generated_puzzles_have_a_unique_key_move(mate_in, count):
  puzzles = chess_mates.generate_mate_puzzles(count, mate_in=mate_in, seed=11)
  assert len(puzzles) == count
  assert len({p["fen"] for p in puzzles}) == count
  for puzzle in puzzles:
    board = chess.Board(puzzle["fen"])
    assert board.is_valid()
    assert winning_first_moves(board, mate_in) == [puzzle["solution"][0]], puzzle
    if mate_in == 2:
      assert not forced_mate(board, 1), "a mate-in-2 puzzle must not mate at once"
    assert len(puzzle["solution"]) == 2 * mate_in - 1
    assert chess_puzzles.score_line(puzzle, puzzle["solution"][::2]) == 1.0


def test_mate_in_two_line_is_legal_and_ends_in_mate():
  for puzzle in chess_mates.generate_mate_puzzles(5, mate_in=2, seed=3):
    board = chess.Board(puzzle["fen"])
    for move in puzzle["solution"]:
      board.push_uci(move)  # raises if illegal
    assert board.is_checkmate()


def test_both_colours_attack_and_generation_is_seeded():
  puzzles = chess_mates.generate_mate_puzzles(30, mate_in=1, seed=5)
  assert {chess.Board(p["fen"]).turn for p in puzzles} == {chess.WHITE, chess.BLACK}
  assert puzzles == chess_mates.generate_mate_puzzles(30, mate_in=1, seed=5)
  assert puzzles != chess_mates.generate_mate_puzzles(30, mate_in=1, seed=6)


def test_mate_in_three_is_refused():
  with pytest.raises(ValueError, match="use 1 or 2"):
    chess_mates.generate_mate_puzzles(1, mate_in=3)


@pytest.mark.slow
def test_every_puzzle_of_the_default_offline_chess_domain_is_unique():
  from whale_jax import tasks
  domain = tasks.get_domain("chess", seed=0)
  instances = [i for split in domain.splits().values() for i in split]
  assert len(instances) == sum(domain.config["split_sizes"].values())
  for instance in instances:
    puzzle = instance.reference
    mate_in = (len(puzzle["solution"]) + 1) // 2
    assert winning_first_moves(chess.Board(puzzle["fen"]), mate_in) == [puzzle["solution"][0]]
