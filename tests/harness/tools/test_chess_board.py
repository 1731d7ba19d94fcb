"""Chess helpers against known positions: move counts, legality, board text."""
import chess
import pytest

from whale_jax.harness.tools import chess_board

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
KIWIPETE = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
# White king e1, rook h1, black rook f8 attacks f1: castling kingside would cross check.
CASTLE_THROUGH_CHECK = "5r1k/8/8/8/8/8/8/4K2R w K - 0 1"
# The white knight on d2 is pinned to the king on e1 by the bishop on b4.
PINNED_KNIGHT = "4k3/8/8/8/1b6/8/3N4/4K3 w - - 0 1"


def test_legal_move_counts_match_perft_one():
  assert len(chess_board.legal_moves(START)) == 20
  assert len(chess_board.legal_moves(KIWIPETE)) == 48  # perft(1) of the Kiwipete position


def test_legal_moves_are_listed_in_the_observation_format():
  lines = chess_board.format_legal_moves(START).splitlines()
  assert lines[0] == "- [a2a3] SAN=a3"
  assert "- [g1f3] SAN=Nf3" in lines
  assert len(lines) == 20


def test_ascii_board_of_the_start_position():
  assert chess_board.board_ascii(START) == "\n".join([
      "  a b c d e f g h",
      "8 r n b q k b n r 8",
      "7 p p p p p p p p 7",
      "6 . . . . . . . . 6",
      "5 . . . . . . . . 5",
      "4 . . . . . . . . 4",
      "3 . . . . . . . . 3",
      "2 P P P P P P P P 2",
      "1 R N B Q K B N R 1",
      "  a b c d e f g h"])


def test_legality_knows_check_pins_and_castling():
  assert chess_board.is_legal_move(START, "e2e4")
  assert chess_board.is_legal_move(START, "Nf3")  # SAN is accepted too
  assert not chess_board.is_legal_move(START, "e2e5")
  assert not chess_board.is_legal_move(CASTLE_THROUGH_CHECK, "e1g1")
  assert chess_board.is_legal_move(CASTLE_THROUGH_CHECK, "h1h2")
  assert not chess_board.is_legal_move(PINNED_KNIGHT, "d2f3")
  assert not chess_board.is_legal_move(START, "")


def test_play_move_returns_the_next_position():
  result = chess_board.play_move(START, "e2e4")
  assert result["fen"] == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
  assert (result["uci"], result["san"], result["is_check"]) == ("e2e4", "e4", False)


def test_fools_mate_is_checkmate():
  fen = START
  for move in ("f2f3", "e7e5", "g2g4"):
    fen = chess_board.play_move(fen, move)["fen"]
  result = chess_board.play_move(fen, "Qh4#")
  assert result["is_checkmate"] and result["is_game_over"]


def test_illegal_move_lists_the_legal_ones():
  with pytest.raises(ValueError, match="'e2e5' is not a legal move .* legal moves \\(UCI\\): a2a3"):
    chess_board.play_move(START, "e2e5")


def test_describe_board_holds_side_fen_board_and_moves():
  text = chess_board.describe_board(START)
  assert text.startswith(f"Side to move: White\nFEN: {START}\nBoard:\n  a b c d e f g h\n")
  assert text.endswith("- [h2h4] SAN=h4")


def test_invalid_fen_is_explained():
  with pytest.raises(ValueError, match="Invalid FEN"):
    chess_board.legal_moves("not a fen")


@pytest.mark.parametrize("move", ["0000", "--", "Z0", ""])
def test_null_and_garbage_moves_are_not_moves(move):
  assert chess_board.parse_move(chess.Board(), move) is None
