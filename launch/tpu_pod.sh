#!/usr/bin/env bash
# Run whale_jax on a Cloud TPU VM slice: every worker runs the same command (multi-controller
# JAX); whale_jax.main calls jax.distributed.initialize and preflight checks on each host.
#
#   export TPU_NAME=whale-v5p-64 ZONE=us-east5-a ACCELERATOR=v5p-64 VERSION=v2-alpha-tpuv5
#   launch/tpu_pod.sh create            # create the slice, or reuse it if it exists
#   launch/tpu_pod.sh copy              # rsync this checkout to ~/whale_jax on every worker
#   launch/tpu_pod.sh install           # venv + pip install -e . on every worker
#   launch/tpu_pod.sh mount             # the shared workdir: NFS=host:/share or BUCKET=name
#   launch/tpu_pod.sh run --config=configs/whale.py:searchqa --workdir=/mnt/whale/run1
#   launch/tpu_pod.sh logs              # fetch each worker's log into launch_logs/
#   launch/tpu_pod.sh delete
#
# The workdir must be one directory every worker sees (checkpoints, the harness archive and
# resuming need it): a Filestore/NFS share (NFS=10.0.0.2:/vol1) or a bucket through gcsfuse
# (BUCKET=my-bucket), mounted at MOUNT (default /mnt/whale) on every worker.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
REMOTE_DIR=${REMOTE_DIR:-whale_jax}
LOG=${LOG:-run.log}

ssh_all() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all \
    --command="$1"
}

case "${1:-}" in
  create)
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
      pip install -q -U pip && pip install -q -e . 'jax[tpu]' && python -c 'import jax; print(jax.devices())'" ;;
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
    ssh_all "cd ~/$REMOTE_DIR && . .venv/bin/activate && \
      python -m whale_jax.main $args 2>&1 | tee $LOG" ;;
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
    sed -n '2,17p' "$0"; exit 2 ;;
esac
