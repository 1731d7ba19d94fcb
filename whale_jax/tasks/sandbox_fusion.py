"""A client for a SandboxFusion-style code-execution service (POST /run_code).

  run = SandboxFusionClient("http://localhost:8080")
  result = run("print(1 + 1)")   # {"stdout": "2\n", "stderr": "", "status": "Finished"}

Request: {"code", "language": "python", "run_timeout", "memory_limit_MB"}. Reply:
{"status": "Success" | "Failed" | "SandboxError", "message", "compile_result",
 "run_result": {"status": "Finished" | "Error" | "TimeLimitExceeded", "stdout", "stderr",
                "return_code", "execution_time"}}.
A "Failed" status is the program's failure (an exception, a timeout) and is returned to the
caller like any other run; transport errors and "SandboxError" replies are retried and then
raised as RuntimeError.
"""
import json
import time
import urllib.error
import urllib.request


class SandboxFusionClient:
  """Runs Python on a SandboxFusion server; returns {"stdout", "stderr", "status"}."""

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
      return {"stdout": str(run_result.get("stdout") or ""),
              "stderr": str(run_result.get("stderr") or compile_result.get("stderr") or ""),
              "status": str(run_result.get("status") or reply.get("message") or
                            reply.get("status"))}
    raise RuntimeError(f"{self.url} failed {self.max_attempts} times: " + "; ".join(errors))
