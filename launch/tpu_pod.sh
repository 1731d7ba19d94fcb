#!/usr/bin/env bash
# Run whale_jax on a Cloud TPU VM slice: every worker runs the same command (multi-controller
# JAX); whale_jax.main calls jax.distributed.initialize and preflight checks on each host.
#
#   export TPU_NAME=whale-v5p-64 ZONE=us-east5-a ACCELERATOR=v5p-64 VERSION=v2-alpha-tpuv5
#   export CONFIG=configs/whale.py:searchqa TOPOLOGY=v5p:2x4x4   # what create checks first
#   launch/tpu_pod.sh check             # here, on CPU: whale_jax.aot for CONFIG on TOPOLOGY
#   launch/tpu_pod.sh create            # check, then create the slice (or reuse it)
#   launch/tpu_pod.sh copy              # rsync this checkout to ~/whale_jax on every worker
#   launch/tpu_pod.sh install           # venv + pinned jax/libtpu (launch/constraints.txt), then
#                                       # python -m whale_jax.check on every worker (TPU devices,
#                                       # the pip-installed sandbox, disk)
#   launch/tpu_pod.sh mount             # the shared workdir: NFS=host:/share or BUCKET=name
#   launch/tpu_pod.sh run --config=configs/whale.py:searchqa --workdir=/mnt/whale/run1
#   launch/tpu_pod.sh status            # is the run alive on each worker, last log lines
#   launch/tpu_pod.sh attach            # follow worker 0's log (Ctrl-C leaves the run alone)
#   launch/tpu_pod.sh stop              # stop the run on every worker
#   launch/tpu_pod.sh logs              # fetch each worker's log into launch_logs/
#   launch/tpu_pod.sh delete
#
# `run` first runs whale_jax.check with the run's --config and --workdir on every worker (its
# data files and endpoints too) and starts nothing when one fails; then it starts the command detached (setsid + nohup) on every worker, so it survives a dropped
# SSH connection; its pid is in ~/whale_jax/run.pid. SKIP_AOT=1 creates without the check.
#
# The workdir must be one directory every worker sees (checkpoints, the harness archive and
# resuming need it): a Filestore/NFS share (NFS=10.0.0.2:/vol1) or a bucket through gcsfuse
# (BUCKET=my-bucket), mounted at MOUNT (default /mnt/whale) on every worker.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
REMOTE_DIR=${REMOTE_DIR:-whale_jax}
LOG=${LOG:-run.log}
PID_FILE=run.pid

ssh_all() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all \
    --command="$1"
}

aot_check() {
  : "${CONFIG:?set CONFIG (e.g. configs/whale.py:searchqa) or SKIP_AOT=1}" \
    "${TOPOLOGY:?set TOPOLOGY (e.g. v5p:2x4x4 for v5p-64) or SKIP_AOT=1}"
  python -m whale_jax.aot --config="$CONFIG" --topology="$TOPOLOGY" ${MESH:+--mesh=$MESH}
}

case "${1:-}" in
  check)
    aot_check ;;
  create)
    if [[ -z "${SKIP_AOT:-}" ]]; then
      aot_check || { echo "whale_jax.aot: the config does not fit $TOPOLOGY; not creating." >&2; exit 1; }
    fi
    if gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG >/dev/null 2>&1; then
      echo "Reusing TPU VM $TPU_NAME."
    else
      : "${ACCELERATOR:?set ACCELERATOR, e.g. v5p-64}" "${VERSION:?set VERSION (TPU software version)}"
      gcloud compute tpus tpu-vm create "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG \
        --accelerator-type="$ACCELERATOR" --version="$VERSION" ${SPOT:+--spot}
    fi ;;
  copy)
    git ls-files -z | tar --null -czf /tmp/whale_jax_src.tgz -T -
    gcloud compute tpus tpu-vm scp /tmp/whale_jax_src.tgz "$TPU_NAME":/tmp/ --zone="$ZONE" \
      $PROJECT_FLAG --worker=all
    ssh_all "mkdir -p ~/$REMOTE_DIR && tar -xzf /tmp/whale_jax_src.tgz -C ~/$REMOTE_DIR" ;;
  install)
    ssh_all "cd ~/$REMOTE_DIR && python3 -m venv .venv && . .venv/bin/activate && \
      pip install -q -U pip && pip install -q -c launch/constraints.txt -e . 'jax[tpu]' && \
      python -m whale_jax.check" ;;
  mount)
    MOUNT=${MOUNT:-/mnt/whale}
    if [[ -n "${NFS:-}" ]]; then
      ssh_all "sudo mkdir -p $MOUNT && (mountpoint -q $MOUNT || sudo mount -t nfs -o rw,hard $NFS $MOUNT)"
    else
      : "${BUCKET:?set NFS=host:/share or BUCKET=bucket-name}"
      ssh_all "mkdir -p $MOUNT 2>/dev/null || (sudo mkdir -p $MOUNT && sudo chown \$USER $MOUNT); \
        mountpoint -q $MOUNT || gcsfuse --implicit-dirs --rename-dir-limit=1000000 $BUCKET $MOUNT"
    fi ;;
  run)
    shift
    args=$(printf '%q ' "$@")
    # Every worker checks itself first (devices, sandbox, disk, the config's data and
    # endpoints); one that fails stops the start everywhere.
    check_args=$(printf '%q ' $(printf '%s\n' "$@" | grep -E '^--(config|workdir)='))
    ssh_all "cd ~/$REMOTE_DIR && . .venv/bin/activate && python -m whale_jax.check $check_args" || {
      echo "whale_jax.check failed on a worker (its FAIL line above says what to fix); not starting." >&2
      exit 1; }
    ssh_all "cd ~/$REMOTE_DIR && . .venv/bin/activate && \
      if [ -f $PID_FILE ] && kill -0 \$(cat $PID_FILE) 2>/dev/null; then \
        echo \"a run is already alive (pid \$(cat $PID_FILE)); stop it first\"; exit 1; fi; \
      setsid nohup python -m whale_jax.main $args > $LOG 2>&1 < /dev/null & echo \$! > $PID_FILE; \
      echo \"\$(hostname): started pid \$(cat $PID_FILE), log ~/$REMOTE_DIR/$LOG\"" ;;
  status)
    ssh_all "cd ~/$REMOTE_DIR && if [ -f $PID_FILE ] && kill -0 \$(cat $PID_FILE) 2>/dev/null; \
      then echo \"\$(hostname): running (pid \$(cat $PID_FILE))\"; \
      else echo \"\$(hostname): not running\"; fi; tail -n 3 $LOG 2>/dev/null || true" ;;
  attach)
    gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=0 \
      --command="tail -n 50 -f ~/$REMOTE_DIR/$LOG" ;;
  stop)
    ssh_all "cd ~/$REMOTE_DIR && if [ -f $PID_FILE ]; then \
      kill -TERM -- -\$(cat $PID_FILE) 2>/dev/null || kill -TERM \$(cat $PID_FILE) 2>/dev/null || true; \
      rm -f $PID_FILE; echo \"\$(hostname): stopped\"; fi" ;;
  logs)
    mkdir -p launch_logs
    workers=$(gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG \
      --format='value(networkEndpoints.len())')
    for ((w = 0; w < ${workers:-1}; w++)); do
      gcloud compute tpus tpu-vm scp "$TPU_NAME:~/$REMOTE_DIR/$LOG" "launch_logs/worker$w.log" \
        --zone="$ZONE" $PROJECT_FLAG --worker="$w" || echo "no log on worker $w"
    done ;;
  delete)
    gcloud compute tpus tpu-vm delete "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --quiet ;;
  *)
    sed -n '2,25p' "$0"; exit 2 ;;
esac
