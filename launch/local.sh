#!/usr/bin/env bash
# Run whale_jax as N local processes (multi-host on one machine, CPU devices), each with
# DEVICES_PER_PROCESS fake devices; logs go to launch_logs/process<i>.log.
#
#   NUM_PROCESSES=2 launch/local.sh --config=configs/demo.py:smoke --config.mesh.data=-1 \
#     --config.mesh.num_devices=0 --workdir=runs/two_hosts
set -euo pipefail
NUM_PROCESSES=${NUM_PROCESSES:-1}
DEVICES_PER_PROCESS=${DEVICES_PER_PROCESS:-1}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
mkdir -p launch_logs
pids=()
for ((i = 0; i < NUM_PROCESSES; i++)); do
  env JAX_PLATFORMS=cpu XLA_FLAGS="--xla_force_host_platform_device_count=$DEVICES_PER_PROCESS" \
    WHALE_JAX_COORDINATOR="127.0.0.1:$PORT" WHALE_JAX_NUM_PROCESSES="$NUM_PROCESSES" \
    WHALE_JAX_PROCESS_ID="$i" python -m whale_jax.main "$@" >"launch_logs/process$i.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
tail -n 5 launch_logs/process0.log
exit $status
