#!/usr/bin/env bash
# Accelerator check: decode, prefill and train-step rates of a ~0.6B Qwen3-shaped model and the
# demo config end to end, in one JSON file, in at most 8 minutes (bench/accelerator_check.py).
#
#   bash bench/accelerator_check.sh --out=/tmp/accelerator_check.json          # GPU
#   bash bench/accelerator_check.sh --smoke --out=/tmp/accelerator_check.json  # CPU, seconds
#
# Runs whale_jax from this checkout (no install needed): the repository root goes first on
# PYTHONPATH. PYTHON picks the interpreter (default python3).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python3}" "${repo}/bench/accelerator_check.py" "$@"
