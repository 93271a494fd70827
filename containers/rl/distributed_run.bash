#!/usr/bin/env bash
# distributed_run.bash — launch training with torchrun on 1 node or N AWS Batch multi-node-parallel nodes.
#
# The same file runs in the CPU image (containers/rl) and in the Isaac Lab image (containers/isaaclab).
#
# Usage: distributed_run.bash [--dry-run] [extra args passed to the entrypoint...]
#        DRY_RUN=1 distributed_run.bash ...   (same as --dry-run)
# With --dry-run the torchrun command line is printed on stdout (one line, shell-quoted with printf %q)
# instead of being executed; diagnostics always go to stderr.
#
# Environment (AWS Batch sets the AWS_BATCH_* ones; see the Batch "multi-node parallel jobs" guide):
#   AWS_BATCH_JOB_NUM_NODES        nodes in the job (default 1)
#   AWS_BATCH_JOB_NODE_INDEX       this node's index (default 0)
#   AWS_BATCH_JOB_MAIN_NODE_INDEX  index of the main node (required when NUM_NODES > 1)
#   AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS
#                                  main node's IP; Batch sets it on WORKER nodes only (required there).
#                                  The main node uses its own address (NODE_IP, default: first address of
#                                  `hostname -I`); a single node uses 127.0.0.1.
#   AWS_BATCH_JOB_ID               job id, "<uuid>#<node index>" on MNP nodes; the rendezvous id is the part
#                                  before '#', whatever the node index (required when NUM_NODES > 1)
#   PROC_PER_NODE                  processes per node (default: GPUs listed by `nvidia-smi -L`, else 1)
#   RDZV_PORT                      rendezvous port on the main node (default 5555)
#   RDZV_JOIN_TIMEOUT              seconds to wait for all nodes to join (default 600)
#   MAX_RESTARTS                   torchrun --max_restarts (default 0: a failure fails the Batch job)
#   TRAIN_ENTRYPOINT               what torchrun runs (default "-m sim2real.workloads.train"; word-split)
#   TRAIN_ARGS_STYLE               "env" (default: the entrypoint reads TASK, MAX_ITERATIONS... from the env)
#                                  or "isaaclab" (append --task "$TASK" --max_iterations "$MAX_ITERATIONS"
#                                  [--num_envs "$NUM_ENVS"] [--seed "$SEED"], Isaac Lab's train.py flags)
#   PYTHON                         python that runs torch.distributed.run (and so the workers); default: the
#                                  `torchrun` on PATH, else python3 -m torch.distributed.run
#   TASK, MAX_ITERATIONS, NUM_ENVS, SEED, OUTPUT_URI, ...  training env, inherited by the entrypoint
#   NCCL_*, GLOO_SOCKET_IFNAME, AWS_*  passed through unchanged (torchrun's children inherit the env)
#
# Exit codes: 2 bad/missing variables; otherwise torchrun's (exec).
set -euo pipefail

log() { echo "[distributed_run] $*" >&2; }
die() { echo "[distributed_run] error: $*" >&2; exit 2; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

DRY_RUN="${DRY_RUN:-0}"
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY_RUN=1
  shift
fi

NNODES="${AWS_BATCH_JOB_NUM_NODES:-1}"
NODE_RANK="${AWS_BATCH_JOB_NODE_INDEX:-0}"
RDZV_PORT="${RDZV_PORT:-5555}"
RDZV_JOIN_TIMEOUT="${RDZV_JOIN_TIMEOUT:-600}"
MAX_RESTARTS="${MAX_RESTARTS:-0}"
TRAIN_ENTRYPOINT="${TRAIN_ENTRYPOINT:--m sim2real.workloads.train}"
TRAIN_ARGS_STYLE="${TRAIN_ARGS_STYLE:-env}"

is_uint "$NNODES" && (( NNODES >= 1 )) || die "AWS_BATCH_JOB_NUM_NODES must be an integer >= 1, got '${NNODES}'"
is_uint "$NODE_RANK" || die "AWS_BATCH_JOB_NODE_INDEX must be an integer >= 0, got '${NODE_RANK}'"
(( NODE_RANK < NNODES )) || die "AWS_BATCH_JOB_NODE_INDEX=${NODE_RANK} is not below AWS_BATCH_JOB_NUM_NODES=${NNODES}"
is_uint "$RDZV_PORT" && (( RDZV_PORT >= 1 && RDZV_PORT <= 65535 )) || die "RDZV_PORT must be a TCP port, got '${RDZV_PORT}'"
is_uint "$RDZV_JOIN_TIMEOUT" || die "RDZV_JOIN_TIMEOUT must be an integer (seconds), got '${RDZV_JOIN_TIMEOUT}'"
is_uint "$MAX_RESTARTS" || die "MAX_RESTARTS must be an integer >= 0, got '${MAX_RESTARTS}'"

if [[ -z "${PROC_PER_NODE:-}" ]]; then
  PROC_PER_NODE=1
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    if is_uint "${gpus:-0}" && (( gpus > 0 )); then PROC_PER_NODE="$gpus"; fi
  fi
fi
is_uint "$PROC_PER_NODE" && (( PROC_PER_NODE >= 1 )) || die "PROC_PER_NODE must be an integer >= 1, got '${PROC_PER_NODE}'"

own_address() {
  if [[ -n "${NODE_IP:-}" ]]; then echo "$NODE_IP"; return; fi
  local ip=""
  ip="$(hostname -I 2>/dev/null | awk '{print $1}')" || true
  if [[ -z "$ip" ]]; then ip="$(hostname -i 2>/dev/null | awk '{print $1}')" || true; fi
  echo "${ip:-127.0.0.1}"
}

if (( NNODES > 1 )); then
  missing=()
  [[ -n "${AWS_BATCH_JOB_NODE_INDEX:-}" ]] || missing+=(AWS_BATCH_JOB_NODE_INDEX)
  [[ -n "${AWS_BATCH_JOB_MAIN_NODE_INDEX:-}" ]] || missing+=(AWS_BATCH_JOB_MAIN_NODE_INDEX)
  [[ -n "${AWS_BATCH_JOB_ID:-}" ]] || missing+=(AWS_BATCH_JOB_ID)
  if (( ${#missing[@]} )); then
    die "AWS_BATCH_JOB_NUM_NODES=${NNODES} needs ${missing[*]} (AWS Batch sets them on multi-node parallel jobs)"
  fi
  MAIN_INDEX="${AWS_BATCH_JOB_MAIN_NODE_INDEX}"
  is_uint "$MAIN_INDEX" || die "AWS_BATCH_JOB_MAIN_NODE_INDEX must be an integer, got '${MAIN_INDEX}'"
  if (( NODE_RANK == MAIN_INDEX )); then
    ROLE=main
    IS_HOST=1
    MAIN_ADDR="$(own_address)"
  else
    ROLE=worker
    IS_HOST=0
    MAIN_ADDR="${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-}"
    [[ -n "$MAIN_ADDR" ]] || die "worker node ${NODE_RANK} of ${NNODES}: AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS is not set (Batch sets it on worker nodes of a multi-node parallel job)"
  fi
  RDZV_ID="${AWS_BATCH_JOB_ID%%#*}"
  [[ -n "$RDZV_ID" ]] || die "AWS_BATCH_JOB_ID='${AWS_BATCH_JOB_ID}' has no job id before '#'"
else
  ROLE=single
  IS_HOST=1
  MAIN_ADDR=127.0.0.1
  RDZV_ID="${AWS_BATCH_JOB_ID:-sim2real-local}"
  RDZV_ID="${RDZV_ID%%#*}"
  RDZV_ID="${RDZV_ID:-sim2real-local}"
fi

if [[ -n "${PYTHON:-}" ]]; then
  read -r -a LAUNCHER <<< "${PYTHON}"
  LAUNCHER+=(-m torch.distributed.run)
elif command -v torchrun >/dev/null 2>&1; then
  LAUNCHER=(torchrun)
else
  LAUNCHER=(python3 -m torch.distributed.run)
fi

read -r -a ENTRY <<< "${TRAIN_ENTRYPOINT}"
(( ${#ENTRY[@]} )) || die "TRAIN_ENTRYPOINT is empty"

EXTRA=()
case "$TRAIN_ARGS_STYLE" in
  env) ;;
  isaaclab)
    [[ -n "${TASK:-}" ]] || die "TRAIN_ARGS_STYLE=isaaclab needs TASK (an Isaac Lab task id)"
    EXTRA+=(--task "$TASK")
    if [[ -n "${MAX_ITERATIONS:-}" ]]; then EXTRA+=(--max_iterations "$MAX_ITERATIONS"); fi
    if [[ -n "${NUM_ENVS:-}" ]]; then EXTRA+=(--num_envs "$NUM_ENVS"); fi
    if [[ -n "${SEED:-}" ]]; then EXTRA+=(--seed "$SEED"); fi
    ;;
  *) die "TRAIN_ARGS_STYLE must be 'env' or 'isaaclab', got '${TRAIN_ARGS_STYLE}'" ;;
esac

CMD=("${LAUNCHER[@]}"
  "--nnodes=${NNODES}"
  "--nproc_per_node=${PROC_PER_NODE}"
  "--node_rank=${NODE_RANK}"
  "--rdzv_id=${RDZV_ID}"
  "--rdzv_backend=c10d"
  "--rdzv_endpoint=${MAIN_ADDR}:${RDZV_PORT}"
  "--rdzv_conf=is_host=${IS_HOST},join_timeout=${RDZV_JOIN_TIMEOUT}"
  "--max_restarts=${MAX_RESTARTS}"
  "${ENTRY[@]}" "${EXTRA[@]}" "$@")

log "role=${ROLE} node=${NODE_RANK}/${NNODES} proc_per_node=${PROC_PER_NODE} rdzv=${MAIN_ADDR}:${RDZV_PORT} id=${RDZV_ID} task=${TASK:-} max_iterations=${MAX_ITERATIONS:-}"
for var in NCCL_SOCKET_IFNAME NCCL_DEBUG NCCL_IB_DISABLE GLOO_SOCKET_IFNAME FI_PROVIDER; do
  if [[ -n "${!var:-}" ]]; then log "${var}=${!var}"; fi
done

if [[ "$DRY_RUN" == "1" ]]; then
  printf '%q ' "${CMD[@]}"
  printf '\n'
  exit 0
fi
exec "${CMD[@]}"
