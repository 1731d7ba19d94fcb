"""Host-side tools a domain can offer its harnesses (tools.<name>(...) inside the sandbox).

  search.BM25Search(documents)          search(query, topk=3, max_doc_tokens=200) -> str
  python_interpreter.python_tool()      python(code) -> str, in a fresh sandboxed process
  python_interpreter.run_python(code)   {"status", "stdout", "stderr", "seconds"}
  chess_board.chess_tools()             board views, legal moves, legality, playing a move

Each tool takes and returns JSON values. Modules are imported on use, so a domain pays only for
the tools it picks.
"""
