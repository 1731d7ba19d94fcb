"""RuntimeConfig is HarnessRuntime's keyword arguments, by name and default (allowed_imports:
None for the domain's), and imports no jax."""
import dataclasses
import inspect
import subprocess
import sys

from whale_jax.harness import runtime
from whale_jax.harness import runtime_config


def test_fields_and_defaults_are_the_runtimes_keyword_arguments():
  parameters = inspect.signature(runtime.HarnessRuntime.__init__).parameters
  expected = {name: p.default for name, p in parameters.items()
              if name not in ("self", "backend", "tokenizer")}
  fields = {f.name: f.default for f in dataclasses.fields(runtime_config.RuntimeConfig)}
  assert fields == {**expected, "allowed_imports": None}


def test_allowed_imports_default_to_the_given_ones():
  assert runtime_config.RuntimeConfig().keywords(("math",))["allowed_imports"] == ("math",)
  assert runtime_config.RuntimeConfig(allowed_imports=("re",)).keywords(
      ("math",))["allowed_imports"] == ("re",)


def test_importing_it_imports_no_jax():
  code = ("import sys; from whale_jax.harness import runtime_config; "
          "print(any(m == 'jax' or m.startswith('jax.') for m in sys.modules))")
  output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout
  assert output.strip() == "False"
