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
    # The one episode collector and training rollouts: under both search and algorithms.
    "rollouts": {"tasks", "harness", "sampling", "models", "parallel", "tokenization"},
    "search": {"rollouts", "tasks", "harness", "sampling", "models", "parallel", "tokenization"},
    # The run report reads the files a run writes (trace files through harness.trajectory);
    # the run log (algorithms) rewrites it after each phase.
    "report": {"harness", "sampling", "models", "parallel", "tokenization"},
    "algorithms": {"report", "search", "rollouts", "tasks", "harness", "sampling", "train",
                   "models", "parallel", "tokenization"},
    # The OpenAI-compatible server, an entry point (no layer imports it): it loads models
    # through algorithms/builders.py, serves a sampling.Sampler, and imports quiet first.
    "serve": {"algorithms", "report", "search", "rollouts", "tasks", "harness", "sampling",
              "train", "models", "parallel", "tokenization", "quiet"},
}
# Top-level modules under every layer: any layer may import them; they import no whale_jax
# module. The other top-level modules (main, aot, quiet) are entry points no layer imports.
FLOOR = {"atomic_files", "seeds", "typed_config"}


def _imported_layers(path):
  """(line, name) of each layer or top-level module of the package that path imports."""
  tree = ast.parse(path.read_text())
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module == "whale_jax" and node.level == 0:
      names = [f"whale_jax.{alias.name}" for alias in node.names]  # from whale_jax import x
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names = [node.module]
    for name in names:
      parts = name.split(".")
      if parts[0] == "whale_jax" and len(parts) > 1:
        yield node.lineno, parts[1]


def test_imports_point_down():
  violations = []
  for layer, allowed in ALLOWED.items():
    for path in sorted((PACKAGE / layer).rglob("*.py")):
      for line, imported in _imported_layers(path):
        if imported != layer and imported not in allowed | FLOOR:
          violations.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
  for name in FLOOR:
    path = PACKAGE / f"{name}.py"
    violations += [f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}"
                   for line, imported in _imported_layers(path)]
  assert not violations, "Upward or sideways imports:\n" + "\n".join(violations)


def test_every_layer_is_known():
  layers = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
  assert layers <= set(ALLOWED), layers - set(ALLOWED)


# ---- Import cycles, between modules of the package (a folder's own modules included) -------

def _module_name(path, package_root):
  parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(package_root):
  """{module: {modules it imports}} over package_root's modules, every import counted (those
  inside functions too: a lazy import that closes a cycle is still a cycle)."""
  paths = {_module_name(path, package_root): path for path in package_root.rglob("*.py")}
  graph = {}
  for name, path in paths.items():
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        imported = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        # `from a.b import c` imports the module a.b.c when there is one, else a.b.
        imported = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in paths
                    else node.module for alias in node.names]
      else:
        continue
      targets.update(module for module in imported if module in paths and module != name)
    graph[name] = targets
  return graph


def _cycles(graph):
  """The strongly connected components of more than one module (Tarjan's algorithm)."""
  index, low, stack, on_stack, components = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for target in sorted(graph[node]):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in on_stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        components.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return components


def _without_package_inits(graph):
  """A package's __init__ re-exporting its own modules, which import each other by the
  package's name, is how Python packages work, not a cycle: edges from a module to the
  __init__ of its own package (or a package above it) are dropped."""
  return {module: {target for target in targets if not module.startswith(target + ".")}
          for module, targets in graph.items()}


def test_no_import_cycles():
  cycles = _cycles(_without_package_inits(_import_graph(PACKAGE)))
  assert not cycles, "Modules that import each other (directly or around a loop):\n" + "\n".join(
      " -> ".join(cycle) for cycle in cycles)


def test_a_planted_cycle_inside_one_folder_is_found(tmp_path):
  package = tmp_path / "whale_jax"
  (package / "algorithms").mkdir(parents=True)
  for name, text in {"__init__.py": "", "algorithms/__init__.py": "",
                     "algorithms/a.py": "from whale_jax.algorithms import b\n",
                     "algorithms/b.py": "import os\n\ndef f():\n"
                                        "  from whale_jax.algorithms import c  # lazy\n",
                     "algorithms/c.py": "import whale_jax.algorithms.a\n",
                     "algorithms/d.py": "from whale_jax.algorithms import a\n"}.items():
    (package / name).write_text(text)
  assert _cycles(_without_package_inits(_import_graph(package))) == [
      ["whale_jax.algorithms.a", "whale_jax.algorithms.b", "whale_jax.algorithms.c"]]
