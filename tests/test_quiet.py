"""whale_jax.quiet: importing it first keeps JAX's TPU probe and transformers' PyTorch advice
off the console (checked in a fresh interpreter, against the same program without it)."""
import os
import subprocess
import sys

PROGRAM = """
import logging
logging.basicConfig(level=logging.INFO)
{first}
import os
import warnings
import jax
import jax.numpy as jnp
jax.devices()
# A donated input that cannot be reused (its shape differs from every output) makes JAX warn.
jax.jit(lambda x: x.sum(), donate_argnums=0)(jnp.ones((4, 3)))
print("JAX_PLATFORMS=" + os.environ.get("JAX_PLATFORMS", ""))
print("ADVICE=" + os.environ.get("TRANSFORMERS_NO_ADVISORY_WARNINGS", ""))
"""


def _run(first):
  environment = {key: value for key, value in os.environ.items()
                 if key not in ("JAX_PLATFORMS", "TRANSFORMERS_NO_ADVISORY_WARNINGS")}
  result = subprocess.run([sys.executable, "-c", PROGRAM.format(first=first)],
                          capture_output=True, text=True, env=environment, timeout=120,
                          check=True)
  return result.stdout, result.stderr


def test_quiet_sets_cpu_and_silences_the_tpu_probe():
  loud_out, loud_err = _run("")
  quiet_out, quiet_err = _run("from whale_jax import quiet")
  assert "backend 'tpu'" in loud_err  # without it JAX probes for a TPU, and says so
  assert "donated buffers were not usable" in loud_err
  assert "donated" not in quiet_err, quiet_err
  assert "JAX_PLATFORMS=\n" in loud_out
  assert "tpu" not in quiet_err.lower(), quiet_err
  assert "JAX_PLATFORMS=cpu" in quiet_out and "ADVICE=1" in quiet_out


def test_an_explicit_platform_is_left_alone(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu,tpu")
  result = subprocess.run([sys.executable, "-c", "from whale_jax import quiet; import os; "
                           "print(os.environ['JAX_PLATFORMS'])"], capture_output=True,
                          text=True, timeout=60, check=True)
  assert result.stdout.strip() == "cpu,tpu"
