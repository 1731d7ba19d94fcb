"""How much of each fixed tolerance the tests use: an audit, on only when asked.

With WHALE_JAX_TOLERANCE_AUDIT=path, every np.testing.assert_allclose call records, per call
site, the largest fraction of its tolerance that a comparison used, max |a - b| / (atol +
rtol |b|) over the elements, and the file gets one JSON line per call site at the end of the
session. A site near 1 passes by a margin that one more seed or reduction order can erase:
its tolerance should come from what differs (see tests/float_bounds.py), not from a
measurement. Off by default: the tests then call numpy's function itself.
"""
import collections
import inspect
import json
import os

import numpy as np

PATH_VARIABLE = "WHALE_JAX_TOLERANCE_AUDIT"
_used = collections.defaultdict(float)
_original = np.testing.assert_allclose


def _site():
  for frame in inspect.stack()[2:]:
    if os.path.basename(frame.filename).startswith("test_"):
      return f"{os.path.relpath(frame.filename)}:{frame.lineno}"
  return "unknown"


def _recording(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
  _original(actual, desired, rtol, atol, *args, **kwargs)  # raises as numpy does
  a = np.asarray(actual, np.float64)
  b = np.asarray(desired, np.float64)
  if a.size and np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
    allowed = atol + rtol * np.abs(b)
    difference = np.abs(a - b)
    used = np.where(allowed > 0, difference / np.where(allowed > 0, allowed, 1.0),
                    np.where(difference > 0, np.inf, 0.0))
    site = _site()
    _used[site] = max(_used[site], float(np.max(used)))


def install():
  if os.environ.get(PATH_VARIABLE):
    np.testing.assert_allclose = _recording


def write():
  path = os.environ.get(PATH_VARIABLE)
  if path and _used:
    with open(path, "a") as f:
      for site, used in sorted(_used.items(), key=lambda item: -item[1]):
        f.write(json.dumps({"site": site, "fraction_used": used}) + "\n")
