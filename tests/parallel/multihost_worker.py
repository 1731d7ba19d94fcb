"""One process of a two-process jax.distributed run on localhost (see test_distributed.py).

  python tests/parallel/multihost_worker.py PORT PROCESS_ID NUM_PROCESSES OUT_JSON [EXTRA]

Each process has 2 CPU devices. It runs the preflight checks, broadcasts host 0's text, and
computes a sharded reduction over a 4-device mesh; results go to OUT_JSON.
"""
import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

from whale_jax.parallel import distributed  # noqa: E402


def main():
  port, process_id, num_processes, out_path = sys.argv[1:5]
  extra = sys.argv[5] if len(sys.argv) > 5 else ""
  distributed.initialize(f"127.0.0.1:{port}", int(num_processes), int(process_id),
                         timeout_seconds=60)
  result = {"process_index": jax.process_index(), "process_count": jax.process_count(),
            "device_count": jax.device_count()}
  try:
    distributed.preflight(mesh_shape={"data": 4}, expected_processes=int(num_processes),
                          extra_fingerprint=extra)
    result["preflight"] = "ok"
  except RuntimeError as error:
    result["preflight"] = str(error)
  result["broadcast"] = distributed.broadcast_text(f"harness from host {jax.process_index()}")
  mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  values = np.arange(24, dtype=np.float32).reshape(8, 3)
  x = jax.make_array_from_callback(values.shape, NamedSharding(mesh, PartitionSpec("data")),
                                   lambda index: values[index])
  result["sum_of_squares"] = float(jax.jit(lambda x: (x * x).sum())(x))
  with open(out_path, "w") as f:
    json.dump(result, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
