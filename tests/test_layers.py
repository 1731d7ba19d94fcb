"""Imports point down the layer stack only (see docs/design.md)."""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "whale_jax"

# Each layer may import itself and the layers listed for it.
ALLOWED = {
    "parallel": set(),
    "tokenization": set(),
    "models": {"parallel"},
    "train": {"models", "parallel", "tokenization"},
    "sampling": {"models", "parallel", "tokenization"},
    "harness": {"sampling", "models", "parallel", "tokenization"},
    "tasks": {"harness", "sampling", "models", "parallel", "tokenization"},
    "search": {"tasks", "harness", "sampling", "models", "parallel", "tokenization"},
    "algorithms": {"search", "tasks", "harness", "sampling", "train", "models", "parallel",
                   "tokenization"},
}


def _imported_layers(path):
  tree = ast.parse(path.read_text())
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names = [node.module]
    for name in names:
      parts = name.split(".")
      if parts[0] == "whale_jax" and len(parts) > 1 and parts[1] in ALLOWED:
        yield node.lineno, parts[1]


def test_imports_point_down():
  violations = []
  for layer, allowed in ALLOWED.items():
    for path in sorted((PACKAGE / layer).rglob("*.py")):
      for line, imported in _imported_layers(path):
        if imported != layer and imported not in allowed:
          violations.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
  assert not violations, "Upward or sideways imports:\n" + "\n".join(violations)


def test_every_layer_is_known():
  layers = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
  assert layers <= set(ALLOWED), layers - set(ALLOWED)
