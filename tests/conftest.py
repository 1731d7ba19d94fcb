"""Test setup: eight fake CPU devices, so mesh and sharding code runs on any machine."""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")



from tests import tolerance_audit  # noqa: E402  (after the environment above)

tolerance_audit.install()


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  tolerance_audit.write()
