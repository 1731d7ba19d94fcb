r"""Serving under load: latency and tokens/s of `python -m whale_jax.serve` at 1-64 clients.

  python bench/serve_load.py                                  # ~3 min on 2 cores
  python bench/serve_load.py --clients=1,8 --server_flags=--bucket_ratio=2

Starts the server (the embedded solver, default settings plus --server_flags, an empty
compilation cache of its own) as a real process on 127.0.0.1 and waits until it listens (it
has warmed every program by then). For
each number of concurrent clients, that many threads each send chat requests back to back
(a question about the solver's toy world, temperature 1, exactly --max_tokens tokens each:
ignore_eos, fresh seeds) until --requests_per_client each are answered. Reported: p50 and p99
request latency (send to whole reply), generated tokens per second over the level's wall
time, and /health's XLA compilation counter before and after the level (it should not
move). Prints a markdown table and the load average; --json_out writes the rows. Last, the
server restarts once on the same compilation cache and reports that warm-up's seconds.
"""
import concurrent.futures
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags
import httpx
import numpy as np

_CLIENTS = flags.DEFINE_list("clients", ["1", "8", "32", "64"], "Concurrent clients per level.")
_REQUESTS_PER_CLIENT = flags.DEFINE_integer("requests_per_client", 4, "Requests each client "
                                            "sends (at least 16 per level in all).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 64, "max_tokens of each request.")
_SERVER_FLAGS = flags.DEFINE_list("server_flags", [], "Extra flags for whale_jax.serve.")
_JSON_OUT = flags.DEFINE_string("json_out", "", "Write the rows here as JSON.")

QUESTIONS = ["Who founded the Vokzag company?", "Where is Nuk?", "hello",
             "Which city is the Vokzag company in, and who founded it?"]


def _start_server(cache_dir):
  """(process, base URL, its startup lines) once the server listens."""
  process = subprocess.Popen(
      [sys.executable, "-m", "whale_jax.serve", "--model=embedded", "--port=0",
       f"--compilation_cache_dir={cache_dir}", *_SERVER_FLAGS.value],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines, found = [], threading.Event()

  def read():
    for line in process.stdout:
      lines.append(line)
      if "http://" in line:
        found.set()
  threading.Thread(target=read, daemon=True).start()
  if not found.wait(1800):
    process.kill()
    raise SystemExit("whale_jax.serve did not start:\n" + "".join(lines))
  url = next(line for line in lines if "http://" in line).split(" on ")[-1].strip()
  return process, url.removesuffix("/v1"), [line for line in lines if "whale_jax" in line]


def _level(base_url, num_clients, seed_offset):
  """One level: num_clients threads sending requests back to back; its row."""
  count = max(_REQUESTS_PER_CLIENT.value, -(-16 // num_clients))
  latencies, tokens = [], []
  lock = threading.Lock()

  def client(index):
    with httpx.Client(timeout=600) as http:
      for r in range(count):
        body = {"model": "embedded", "max_tokens": _MAX_TOKENS.value, "temperature": 1.0,
                "ignore_eos": True, "seed": seed_offset + index * count + r,
                "messages": [{"role": "user", "content": QUESTIONS[(index + r) % 4]}]}
        start = time.perf_counter()
        reply = http.post(f"{base_url}/v1/chat/completions", json=body)
        elapsed = time.perf_counter() - start
        reply.raise_for_status()
        with lock:
          latencies.append(elapsed)
          tokens.append(reply.json()["usage"]["completion_tokens"])

  before = httpx.get(f"{base_url}/health").json()["compilations"]
  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(num_clients) as pool:
    list(pool.map(client, range(num_clients)))
  wall = time.perf_counter() - start
  after = httpx.get(f"{base_url}/health").json()["compilations"]
  return {"clients": num_clients, "requests": len(latencies),
          "p50_seconds": float(np.percentile(latencies, 50)),
          "p99_seconds": float(np.percentile(latencies, 99)),
          "tokens_per_second": sum(tokens) / wall, "generated_tokens": sum(tokens),
          "compilations_before": before, "compilations_after": after,
          "load_average": round(os.getloadavg()[0], 2)}


def main(argv):
  del argv
  logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per request
  load_before = os.getloadavg()[0]
  with tempfile.TemporaryDirectory() as cache_dir:
    process, base_url, startup = _start_server(cache_dir)
    try:
      health = httpx.get(f"{base_url}/health").json()
      rows = [_level(base_url, int(c), 1000 * i) for i, c in enumerate(_CLIENTS.value)]
    finally:
      process.terminate()
      process.wait(30)
    process, base_url, _ = _start_server(cache_dir)
    restart = httpx.get(f"{base_url}/health").json()["warmup_seconds"]
    process.terminate()
    process.wait(30)
  print("".join(startup), end="")
  print(f"warm-up {health['warmup_seconds']:.1f} s, {health['warmup_programs']} programs "
        f"(restart on that compilation cache: {restart:.1f} s); load average "
        f"{load_before:.2f} before start, {os.getloadavg()[0]:.2f} at the end")
  print("| clients | requests | p50 latency (s) | p99 latency (s) | generated tokens/s | "
        "compilations before -> after | load average |")
  print("|---|---|---|---|---|---|---|")
  for row in rows:
    print(f"| {row['clients']} | {row['requests']} | {row['p50_seconds']:.2f} | "
          f"{row['p99_seconds']:.2f} | {row['tokens_per_second']:,.0f} | "
          f"{row['compilations_before']} -> {row['compilations_after']} | "
          f"{row['load_average']} |")
  if _JSON_OUT.value:
    with open(_JSON_OUT.value, "w") as file:
      json.dump({"warmup_seconds": health["warmup_seconds"], "restart_warmup_seconds": restart,
                 "warmup_programs": health["warmup_programs"], "rows": rows}, file, indent=1)


if __name__ == "__main__":
  app.run(main)
