"""Where the sandbox finds a virtual environment that lies under the host's /tmp."""

import sys

import pytest

from whale_jax.harness import confinement


def test_a_venv_under_tmp_is_bound_outside_the_namespaces_tmp(monkeypatch):
  monkeypatch.setattr(sys, "prefix", "/tmp/clone/.venv")
  monkeypatch.setattr(sys, "base_prefix", "/usr")
  args = confinement._bwrap_args("/work/x", use_site_packages=True)  # pylint: disable=protected-access
  pairs = list(zip(args, args[1:], args[2:]))
  assert ("--ro-bind", "/tmp/clone/.venv", "/opt/whale_venv") in pairs
  # Nothing is mounted under the namespace's /tmp, which stays the link into the private folder.
  assert not [dst for flag, _, dst in pairs if flag in ("--ro-bind", "--bind")
              and dst.startswith("/tmp")]
  assert ("--symlink", "/sandbox/tmp", "/tmp") in pairs


def test_a_python_runtime_under_tmp_is_refused_with_the_reason(monkeypatch):
  monkeypatch.setattr(sys, "base_prefix", "/tmp/python")
  monkeypatch.setattr(sys, "prefix", "/tmp/python")
  with pytest.raises(confinement.SandboxUnavailable, match="lies under /tmp"):
    confinement._bwrap_args("/work/x", use_site_packages=False)  # pylint: disable=protected-access
