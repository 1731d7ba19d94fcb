"""A client for a SandboxFusion-style code-execution service (POST /run_code).

  run = SandboxFusionClient("http://localhost:8080")
  result = run("print(1 + 1)")   # {"status": "ok", "stdout": "2\n", "stderr": ""}

Request: {"code", "language": "python", "run_timeout", "memory_limit_MB"}. Reply:
{"status": "Success" | "Failed" | "SandboxError", "message", "compile_result",
 "run_result": {"status": "Finished" | "Error" | "TimeLimitExceeded", "stdout", "stderr",
                "return_code", "execution_time"}}.
The result has the statuses of the harness's interpreter (python_interpreter.STATUSES): "ok"
(Finished with return code 0), "error" (it raised or exited non-zero), "timeout"
(TimeLimitExceeded), "crashed" (anything else). Transport errors and "SandboxError" replies
are retried and then raised as RuntimeError.
"""
import json
import time
import urllib.error
import urllib.request


class SandboxFusionClient:
  """Runs Python on a SandboxFusion server; returns {"status", "stdout", "stderr"}."""

  def __init__(self, base_url, run_timeout_seconds=30, memory_limit_mb=1024,
               request_timeout_seconds=None, max_attempts=3, backoff_seconds=0.5):
    if not base_url.startswith(("http://", "https://")):
      raise ValueError(f"base_url={base_url!r} must be the http(s) address of a SandboxFusion "
                       "server, e.g. http://localhost:8080.")
    self.url = base_url.rstrip("/") + "/run_code"
    self.run_timeout_seconds = run_timeout_seconds
    self.memory_limit_mb = memory_limit_mb
    self.request_timeout_seconds = request_timeout_seconds or run_timeout_seconds + 30
    self.max_attempts = max_attempts
    self.backoff_seconds = backoff_seconds

  def __call__(self, code):
    body = json.dumps({"code": code, "language": "python",
                       "run_timeout": self.run_timeout_seconds,
                       "memory_limit_MB": self.memory_limit_mb}).encode()
    errors = []
    for attempt in range(self.max_attempts):
      if attempt:
        time.sleep(self.backoff_seconds * 2**(attempt - 1))
      request = urllib.request.Request(self.url, data=body, method="POST",
                                       headers={"Content-Type": "application/json"})
      try:
        with urllib.request.urlopen(request, timeout=self.request_timeout_seconds) as response:
          reply = json.loads(response.read())
      except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as error:
        errors.append(f"{type(error).__name__}: {error}")
        continue
      if not isinstance(reply, dict) or reply.get("status") == "SandboxError":
        errors.append(f"sandbox error: {str(reply)[:200]}")
        continue
      run_result = reply.get("run_result") or {}
      compile_result = reply.get("compile_result") or {}
      return {"status": _status(run_result), "stdout": str(run_result.get("stdout") or ""),
              "stderr": str(run_result.get("stderr") or compile_result.get("stderr") or
                            reply.get("message") or "")}
    raise RuntimeError(f"{self.url} failed {self.max_attempts} times: " + "; ".join(errors))


def _status(run_result):
  status = run_result.get("status")
  if status == "Finished":
    return "ok" if run_result.get("return_code") in (0, None) else "error"
  if status == "TimeLimitExceeded":
    return "timeout"
  if status == "Error":
    return "error"
  return "crashed"
