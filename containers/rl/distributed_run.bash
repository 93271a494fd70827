#!/usr/bin/env bash
# distributed_run.bash — launch training with torchrun on 1 node or N nodes (AWS Batch multi-node parallel, Slurm,
# or a Kubeflow PyTorchJob's replicas).
#
# The same file runs in the CPU image (containers/rl) and in the Isaac Lab image (containers/isaaclab).
#
# Usage: distributed_run.bash [--dry-run] [extra args passed to the entrypoint...]
#        DRY_RUN=1 distributed_run.bash ...   (same as --dry-run)
# With --dry-run the torchrun command line is printed on stdout (one line, shell-quoted with printf %q)
# instead of being executed; diagnostics always go to stderr.
#
# Scheduler: AWS Batch (AWS_BATCH_JOB_NUM_NODES set), Slurm (SLURM_JOB_ID set, e.g. SageMaker HyperPod, one
# `srun` task per node: include/sim2real/orchestration/slurm/train_rl.sbatch) or a Kubeflow PyTorchJob (neither of
# those, PET_NNODES set: HyperPod orchestrated by EKS, one replica per node); none = a single local node.
#
# Kubeflow PyTorchJob environment (the training operator sets it on every replica of a job with a Master replica;
# source: kubeflow/training-operator v1.9.0, pkg/controller.v1/pytorch/envvar.go setPodEnv and master.go):
#   PET_NNODES                     replicas in the job, Master + Workers (elasticPolicy writes "MIN:MAX": only
#                                  MIN == MAX is accepted, this launcher runs a fixed number of nodes)
#   PET_NODE_RANK                  this replica's index: Master 0, Worker i -> i + 1 (RANK holds the same value)
#   PET_MASTER_ADDR / MASTER_ADDR  "<job name>-master-0", the Master pod's Service (required when > 1 node);
#                                  node 0 hosts the rendezvous there
#   PET_MASTER_PORT / MASTER_PORT  the Master container's port "pytorchjob-port" (operator default 23456): the
#                                  rendezvous port, unless RDZV_PORT is set
#   PET_NPROC_PER_NODE             the job's spec.nprocPerNode: PROC_PER_NODE's default when it is an integer
#   WORLD_SIZE                     replicas x nprocPerNode (x 1 without it): checked against the above
#   PET_RDZV_ID                    rendezvous id (elasticPolicy.rdzvId); default: the job name (MASTER_ADDR
#                                  without "-master-0"), the same on every replica
# RANK and WORLD_SIZE count replicas here, and torchrun takes every PET_<FLAG> as that flag's default (PET_STANDALONE
# would replace the rendezvous): once mapped they are all unset, so torchrun and train_multigpu see only the flags
# below (torchrun's agent then sets RANK/WORLD_SIZE per process).
#
# Slurm environment (srun sets the SLURM_* ones; the batch script sets MASTER_ADDR):
#   SLURM_NNODES / SLURM_JOB_NUM_NODES  nodes in the job
#   SLURM_NODEID                   this node's index in the allocation (0 = first host of SLURM_JOB_NODELIST)
#   MASTER_ADDR                    the first host of the allocation (required when the job has > 1 node);
#                                  node 0 hosts the rendezvous there
#   SLURM_JOB_ID                   rendezvous id
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
#   TRAIN_ARGS_STYLE               "env" (default: the entrypoint reads TASK, MAX_ITERATIONS... from the env),
#                                  "isaaclab" (Isaac Lab 2.x: torchrun runs TRAIN_ENTRYPOINT = scripts/
#                                  reinforcement_learning/skrl/train.py --distributed --headless, and gets --task
#                                  "$TASK" --max_iterations "$MAX_ITERATIONS" [--num_envs "$NUM_ENVS"] [--seed "$SEED"])
#                                  or "isaaclab3" (Isaac Lab 3.0: see below)
#   ISAACLAB_LOG_DIR               (isaaclab style) where Isaac Lab's skrl train.py logs: default "$PWD/logs/skrl"
#                                  (it writes logs/skrl/<experiment>/<timestamp>_ppo_torch/ under its cwd)
#   PUBLISH_WAIT_SECONDS           (isaaclab style, multi-node main node) how long to wait for the node that ran
#                                  global rank 0 to publish (default 1800)
#   PYTHON                         python that runs torch.distributed.run (and so the workers); default: the
#                                  `torchrun` on PATH, else python3 -m torch.distributed.run
#   TASK, MAX_ITERATIONS, NUM_ENVS, SEED, OUTPUT_URI, ...  training env, inherited by the entrypoint
#   NCCL_*, GLOO_SOCKET_IFNAME, AWS_*  passed through unchanged (torchrun's children inherit the env)
#
# TRAIN_ARGS_STYLE=isaaclab (or isaaclab3) with OUTPUT_URI set adds two steps around torchrun (Isaac Lab's script writes only
# to its own log dir; see sim2real.workloads.publish for the rules):
#   before: `python -m sim2real.workloads.publish --find-resume DIR` downloads the newest complete checkpoint of
#           OUTPUT_URI (every node), and torchrun gets `--checkpoint <file>`; MAX_ITERATIONS counts across resumes
#           (like the project trainer): when the earlier attempt's manifest gives the resumed iteration (or, in
#           a retraining round, SIM2REAL_RESUMED_ITERATION for the seeded SIM2REAL_RESUMED_CHECKPOINT_URI), only
#           the remaining iterations are run, and none when it is already reached.
#   after torchrun exits 0: `python -m sim2real.workloads.publish --log-dir ISAACLAB_LOG_DIR` uploads the newest
#           checkpoint (+ .sha256 sidecar) and TensorBoard events to OUTPUT_URI and writes manifest.json last.
#           skrl lets only global rank 0 write checkpoints and torchrun's c10d rendezvous numbers nodes by host
#           address, not by Batch node index, so every node publishes what it has (--if-present) and the main
#           node (AWS_BATCH_JOB_MAIN_NODE_INDEX; the only node of a single-node job) also waits for the manifest
#           when rank 0 ran elsewhere, since its exit ends the Batch job.
#   torchrun then runs as a child (SIGTERM/SIGINT forwarded to it), not exec'ed; its non-zero exit code is the
#   launcher's, and a publish failure exits 1. The other style still execs torchrun.
#   --dry-run prints the torchrun line on stdout and the resume/publish steps on stderr ("dry-run: ...").
#   Without OUTPUT_URI the isaaclab style neither resumes nor publishes (a warning says so).
#
# TRAIN_ARGS_STYLE=isaaclab3 (Isaac Lab 3.0): no torchrun here. Isaac Lab 3.0's own multi-GPU launcher
# `isaaclab train_multigpu` builds the torchrun command itself (`python -m torch.distributed.run`, one rank per
# GPU, `--distributed` added to the trainer's arguments) from torchrun-style *command-line flags*, not from
# environment variables: --num_gpus/--nproc_per_node, --nnodes, --node_rank, --rdzv_backend, --rdzv_endpoint,
# --rdzv_id, --max_restarts (also --master_addr/--master_port, unused here); there is no --rdzv_conf, so
# is_host is torchrun's own guess (the endpoint is this host's address) and join_timeout its c10d default,
# 600 s. Every unrecognised argument goes to `isaaclab train --rl_library skrl` on every rank (--task,
# --max_iterations, --num_envs, --seed, --checkpoint, as in 2.x). Sources, isaac-sim/IsaacLab (release v3.0.0,
# 2026-10-20): source/isaaclab/isaaclab/cli/__init__.py (the `train_multigpu` subcommand),
# source/isaaclab/isaaclab/cli/multigpu.py (build_parser, TORCHRUN_ARGS, build_launch_command),
# source/isaaclab_rl/isaaclab_rl/entrypoints/multigpu.py (run_train_multigpu_cli), the skrl trainer
# (--checkpoint, logs/skrl/<experiment>/<timestamp>_<algorithm>_<framework>/ under the working directory), and
# docs/source/features/multi_gpu.rst ("train_multigpu is experimental").
# So the launcher maps the scheduler's variables (Batch or Slurm, as above) onto
#   TRAIN_ENTRYPOINT --num_gpus=PROC_PER_NODE --nnodes=N --node_rank=R --rdzv_backend=c10d
#     --rdzv_endpoint=MAIN_ADDR:RDZV_PORT --rdzv_id=ID --max_restarts=MAX_RESTARTS --task ... [--checkpoint F] "$@"
# TRAIN_ENTRYPOINT defaults to "isaaclab train_multigpu --rl_library skrl" (the image sets its own). Resume and
# publish work as in the isaaclab style (below). Refused (exit 2): RDZV_JOIN_TIMEOUT other than 600 (no flag
# carries it), skrl's JAX framework (train_multigpu then uses skrl's JAX launcher, which takes no rendezvous
# flags), and an entrypoint of the other Isaac Lab version (2.x's skrl/train.py here, train_multigpu in isaaclab).
#
# Exit codes: 2 bad/missing variables; otherwise torchrun's (exec), or 1 when publishing fails.
set -euo pipefail

log() { echo "[distributed_run] $*" >&2; }
die() { echo "[distributed_run] error: $*" >&2; exit 2; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

DRY_RUN="${DRY_RUN:-0}"
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY_RUN=1
  shift
fi

SCHEDULER=batch
if [[ -z "${AWS_BATCH_JOB_NUM_NODES:-}" && -n "${SLURM_JOB_ID:-}" ]]; then SCHEDULER=slurm; fi
if [[ -z "${AWS_BATCH_JOB_NUM_NODES:-}" && -z "${SLURM_JOB_ID:-}" && -n "${PET_NNODES:-}" ]]; then SCHEDULER=pytorchjob; fi
if [[ "$SCHEDULER" == "pytorchjob" ]]; then
  NNODES="$PET_NNODES"
  if [[ "$NNODES" =~ ^([0-9]+):([0-9]+)$ ]]; then
    [[ "${BASH_REMATCH[1]}" == "${BASH_REMATCH[2]}" ]] || die "PET_NNODES=${NNODES} is an elastic range (elasticPolicy minReplicas:maxReplicas): this launcher runs a fixed number of nodes; set minReplicas = maxReplicas"
    NNODES="${BASH_REMATCH[1]}"
  fi
  is_uint "$NNODES" && (( NNODES >= 1 )) || die "PET_NNODES must be an integer >= 1, got '${PET_NNODES}'"
  if (( NNODES > 1 )) && [[ -z "${PET_NODE_RANK:-}" ]]; then
    die "PET_NNODES=${NNODES} needs PET_NODE_RANK (the training operator sets it on each replica of a PyTorchJob with a Master replica)"
  fi
  NODE_RANK="${PET_NODE_RANK:-0}"
  is_uint "$NODE_RANK" || die "PET_NODE_RANK must be an integer >= 0, got '${NODE_RANK}'"
  (( NODE_RANK < NNODES )) || die "PET_NODE_RANK=${NODE_RANK} is not below PET_NNODES=${NNODES}"
  if [[ -n "${RANK:-}" && "$RANK" != "$NODE_RANK" ]]; then
    die "RANK=${RANK} disagrees with PET_NODE_RANK=${NODE_RANK} (the training operator gives both the replica index)"
  fi
  if [[ -n "${PET_MASTER_ADDR:-}" && -n "${MASTER_ADDR:-}" && "$PET_MASTER_ADDR" != "$MASTER_ADDR" ]]; then
    die "PET_MASTER_ADDR=${PET_MASTER_ADDR} disagrees with MASTER_ADDR=${MASTER_ADDR}"
  fi
  KF_MASTER_ADDR="${PET_MASTER_ADDR:-${MASTER_ADDR:-}}"
  KF_NPROC=1
  if [[ -n "${PET_NPROC_PER_NODE:-}" ]] && is_uint "$PET_NPROC_PER_NODE"; then
    KF_NPROC="$PET_NPROC_PER_NODE"
    if [[ -n "${PROC_PER_NODE:-}" && "$PROC_PER_NODE" != "$KF_NPROC" ]]; then
      die "PROC_PER_NODE=${PROC_PER_NODE} disagrees with PET_NPROC_PER_NODE=${KF_NPROC} (the PyTorchJob's nprocPerNode)"
    fi
    PROC_PER_NODE="$KF_NPROC"
  fi   # "auto"/"gpu"/"cpu": PROC_PER_NODE or the GPU count below, and the operator counts 1 per replica
  if [[ -n "${WORLD_SIZE:-}" ]] && [[ "$WORLD_SIZE" != "$(( NNODES * KF_NPROC ))" ]]; then
    die "WORLD_SIZE=${WORLD_SIZE} is not PET_NNODES x nprocPerNode = ${NNODES} x ${KF_NPROC}"
  fi
  if [[ -z "${RDZV_PORT:-}" ]]; then RDZV_PORT="${PET_MASTER_PORT:-${MASTER_PORT:-5555}}"; fi
  KF_RDZV_ID="${PET_RDZV_ID:-}"
  unset RANK WORLD_SIZE
  while read -r var; do unset "$var"; done < <(compgen -e | grep '^PET_' || true)
elif [[ "$SCHEDULER" == "slurm" ]]; then
  NNODES="${SLURM_NNODES:-${SLURM_JOB_NUM_NODES:-1}}"
  NODE_RANK="${SLURM_NODEID:-0}"
  is_uint "$NNODES" && (( NNODES >= 1 )) || die "SLURM_NNODES must be an integer >= 1, got '${NNODES}'"
  is_uint "$NODE_RANK" || die "SLURM_NODEID must be an integer >= 0, got '${NODE_RANK}'"
  (( NODE_RANK < NNODES )) || die "SLURM_NODEID=${NODE_RANK} is not below SLURM_NNODES=${NNODES}"
else
  NNODES="${AWS_BATCH_JOB_NUM_NODES:-1}"
  NODE_RANK="${AWS_BATCH_JOB_NODE_INDEX:-0}"
fi
RDZV_PORT="${RDZV_PORT:-5555}"
RDZV_JOIN_TIMEOUT="${RDZV_JOIN_TIMEOUT:-600}"
MAX_RESTARTS="${MAX_RESTARTS:-0}"
TRAIN_ARGS_STYLE="${TRAIN_ARGS_STYLE:-env}"
if [[ "$TRAIN_ARGS_STYLE" == "isaaclab3" ]]; then
  TRAIN_ENTRYPOINT="${TRAIN_ENTRYPOINT:-isaaclab train_multigpu --rl_library skrl}"
else
  TRAIN_ENTRYPOINT="${TRAIN_ENTRYPOINT:--m sim2real.workloads.train}"
fi

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

if [[ "$SCHEDULER" == "slurm" ]] && (( NNODES > 1 )); then
  [[ -n "${MASTER_ADDR:-}" ]] || die "SLURM_NNODES=${NNODES} needs MASTER_ADDR (the first host of \`scontrol show hostnames \$SLURM_JOB_NODELIST\`; the batch script sets it)"
  MAIN_ADDR="$MASTER_ADDR"
  if (( NODE_RANK == 0 )); then ROLE=main; IS_HOST=1; else ROLE=worker; IS_HOST=0; fi
  RDZV_ID="slurm-${SLURM_JOB_ID}"
elif [[ "$SCHEDULER" == "pytorchjob" ]] && (( NNODES > 1 )); then
  [[ -n "$KF_MASTER_ADDR" ]] || die "PET_NNODES=${NNODES} needs PET_MASTER_ADDR or MASTER_ADDR (the training operator sets them to the Master replica's Service when the PyTorchJob has a Master replica)"
  MAIN_ADDR="$KF_MASTER_ADDR"
  if (( NODE_RANK == 0 )); then ROLE=main; IS_HOST=1; else ROLE=worker; IS_HOST=0; fi
  RDZV_ID="${KF_RDZV_ID:-${KF_MASTER_ADDR%-master-0}}"
elif (( NNODES > 1 )); then
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
  if [[ "$SCHEDULER" == "slurm" ]]; then
    RDZV_ID="slurm-${SLURM_JOB_ID}"
  elif [[ "$SCHEDULER" == "pytorchjob" ]]; then
    RDZV_ID="${KF_RDZV_ID:-${KF_MASTER_ADDR%-master-0}}"
    RDZV_ID="${RDZV_ID:-sim2real-local}"
  else
    RDZV_ID="${AWS_BATCH_JOB_ID:-sim2real-local}"
    RDZV_ID="${RDZV_ID%%#*}"
    RDZV_ID="${RDZV_ID:-sim2real-local}"
  fi
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

PUBLISH=0
case "$TRAIN_ARGS_STYLE" in
  env | isaaclab | isaaclab3) ;;
  *) die "TRAIN_ARGS_STYLE must be 'env', 'isaaclab' (Isaac Lab 2.x) or 'isaaclab3' (Isaac Lab 3.0), got '${TRAIN_ARGS_STYLE}'" ;;
esac
if [[ "$TRAIN_ARGS_STYLE" == "isaaclab3" ]]; then
  [[ " ${ENTRY[*]} " != *"/skrl/train.py "* ]] || die "TRAIN_ENTRYPOINT='${TRAIN_ENTRYPOINT}' is Isaac Lab 2.x's skrl script: use TRAIN_ARGS_STYLE=isaaclab with it, or 'isaaclab train_multigpu --rl_library skrl' (Isaac Lab 3.0) here"
  [[ "$RDZV_JOIN_TIMEOUT" == "600" ]] || die "RDZV_JOIN_TIMEOUT=${RDZV_JOIN_TIMEOUT}: Isaac Lab 3.0's train_multigpu has no --rdzv_conf, so the rendezvous waits torchrun's c10d default of 600 s; unset RDZV_JOIN_TIMEOUT"
  args_seen=" ${ENTRY[*]} $* "
  if [[ "$args_seen" == *" --ml_framework jax "* || "$args_seen" == *" --ml_framework=jax "* ]]; then
    die "TRAIN_ARGS_STYLE=isaaclab3 runs skrl with PyTorch: with --ml_framework jax, train_multigpu switches to skrl's JAX launcher, which refuses the rendezvous flags this launcher passes"
  fi
  if [[ "${TASK:-}" == *-v0 ]]; then
    log "warning: TASK=${TASK}: Isaac Lab 3.0 registers its tasks without the -v0 suffix (e.g. Isaac-Velocity-Rough-H1)"
  fi
elif [[ "$TRAIN_ARGS_STYLE" == "isaaclab" ]]; then
  [[ " ${ENTRY[*]} " != *" train_multigpu "* ]] || die "TRAIN_ENTRYPOINT='${TRAIN_ENTRYPOINT}' is Isaac Lab 3.0's train_multigpu: use TRAIN_ARGS_STYLE=isaaclab3 with it (it runs torchrun itself)"
fi
if [[ "$TRAIN_ARGS_STYLE" == isaaclab* ]]; then
  [[ -n "${TASK:-}" ]] || die "TRAIN_ARGS_STYLE=${TRAIN_ARGS_STYLE} needs TASK (an Isaac Lab task id)"
  if [[ -n "${MAX_ITERATIONS:-}" ]]; then
    is_uint "$MAX_ITERATIONS" && (( MAX_ITERATIONS >= 1 )) || die "MAX_ITERATIONS must be an integer >= 1, got '${MAX_ITERATIONS}'"
  fi
  if [[ -n "${OUTPUT_URI:-}" ]]; then
    PUBLISH=1
  else
    log "warning: TRAIN_ARGS_STYLE=${TRAIN_ARGS_STYLE} without OUTPUT_URI: no resume and no publish (checkpoints stay in the container)"
  fi
fi
PUBLISH_WAIT_SECONDS="${PUBLISH_WAIT_SECONDS:-1800}"
is_uint "$PUBLISH_WAIT_SECONDS" || die "PUBLISH_WAIT_SECONDS must be an integer (seconds), got '${PUBLISH_WAIT_SECONDS}'"
ISAACLAB_LOG_DIR="${ISAACLAB_LOG_DIR:-${PWD}/logs/skrl}"
if [[ -n "${PYTHON:-}" ]]; then read -r -a PY <<< "${PYTHON}"; else PY=(python3); fi
PUBLISH_MODULE=("${PY[@]}" -m sim2real.workloads.publish)
START_EPOCH="$(date +%s.%N 2>/dev/null)" || START_EPOCH=""
[[ "$START_EPOCH" =~ ^[0-9]+\.[0-9]+$ ]] || START_EPOCH="$(date +%s)"   # no %N outside GNU date

RESUME_URI="" RESUME_PATH="" RESUME_STEP="" RESUME_ITERATION="" RESUME_SHA256=""
RUN_ITERATIONS="${MAX_ITERATIONS:-}"
SKIP_TRAIN=0
if (( PUBLISH )); then
  RESUME_DIR="${RESUME_DIR:-${TMPDIR:-/tmp}/sim2real-resume-${RDZV_ID}-${NODE_RANK}}"
  FIND_RESUME=("${PUBLISH_MODULE[@]}" --find-resume "$RESUME_DIR" --output-uri "$OUTPUT_URI" --task "$TASK")
  if [[ "$DRY_RUN" == "1" ]]; then
    log "dry-run: before training: $(printf '%q ' "${FIND_RESUME[@]}")(adds --checkpoint <file> when OUTPUT_URI holds a complete checkpoint)"
  else
    assignments="$("${FIND_RESUME[@]}")" || { rc=$?; echo "[distributed_run] error: resume discovery in ${OUTPUT_URI} failed (exit ${rc})" >&2; exit "$rc"; }
    eval "$assignments"   # RESUME_URI, RESUME_PATH, RESUME_STEP, RESUME_ITERATION, RESUME_SHA256 (shlex-quoted)
    if [[ -n "$RESUME_PATH" ]]; then
      log "resuming from ${RESUME_URI} (step ${RESUME_STEP}, iteration ${RESUME_ITERATION:-unknown})"
      if [[ -n "$RESUME_ITERATION" && -n "${MAX_ITERATIONS:-}" ]]; then
        RUN_ITERATIONS=$(( MAX_ITERATIONS - RESUME_ITERATION ))
        if (( RUN_ITERATIONS <= 0 )); then
          SKIP_TRAIN=1
          log "iteration ${RESUME_ITERATION} already reaches MAX_ITERATIONS=${MAX_ITERATIONS}: no training, publish only"
        else
          log "running the remaining ${RUN_ITERATIONS} of MAX_ITERATIONS=${MAX_ITERATIONS} iterations"
        fi
      fi
    fi
  fi
fi

EXTRA=()
if [[ "$TRAIN_ARGS_STYLE" == isaaclab* ]]; then
  EXTRA+=(--task "$TASK")
  if [[ -n "${RUN_ITERATIONS}" ]]; then EXTRA+=(--max_iterations "$RUN_ITERATIONS"); fi
  if [[ -n "${NUM_ENVS:-}" ]]; then EXTRA+=(--num_envs "$NUM_ENVS"); fi
  if [[ -n "${SEED:-}" ]]; then EXTRA+=(--seed "$SEED"); fi
  if [[ -n "$RESUME_PATH" ]]; then EXTRA+=(--checkpoint "$RESUME_PATH"); fi
fi

if [[ "$TRAIN_ARGS_STYLE" == "isaaclab3" ]]; then
  # train_multigpu's own flags (isaaclab/cli/multigpu.py build_parser), which it hands to torchrun
  CMD=("${ENTRY[@]}"
    "--num_gpus=${PROC_PER_NODE}"
    "--nnodes=${NNODES}"
    "--node_rank=${NODE_RANK}"
    "--rdzv_backend=c10d"
    "--rdzv_endpoint=${MAIN_ADDR}:${RDZV_PORT}"
    "--rdzv_id=${RDZV_ID}"
    "--max_restarts=${MAX_RESTARTS}"
    "${EXTRA[@]}" "$@")
else
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
fi

log "scheduler=${SCHEDULER} role=${ROLE} node=${NODE_RANK}/${NNODES} proc_per_node=${PROC_PER_NODE} rdzv=${MAIN_ADDR}:${RDZV_PORT} id=${RDZV_ID} task=${TASK:-} max_iterations=${MAX_ITERATIONS:-}"
for var in NCCL_SOCKET_IFNAME NCCL_DEBUG NCCL_IB_DISABLE GLOO_SOCKET_IFNAME FI_PROVIDER; do
  if [[ -n "${!var:-}" ]]; then log "${var}=${!var}"; fi
done

if (( ! PUBLISH )); then
  if [[ "$DRY_RUN" == "1" ]]; then
    printf '%q ' "${CMD[@]}"
    printf '\n'
    exit 0
  fi
  exec "${CMD[@]}"
fi

# --- isaaclab/isaaclab3 style with OUTPUT_URI: torchrun (or train_multigpu) as a child, then publish ---
# --since: only checkpoints this launch wrote (a persistent log dir may hold earlier attempts' runs)
PUBLISH_CMD=("${PUBLISH_MODULE[@]}" --log-dir "$ISAACLAB_LOG_DIR" --output-uri "$OUTPUT_URI" --task "$TASK"
  --since "$START_EPOCH")
if [[ -n "${RUN_KEY:-}" ]]; then PUBLISH_CMD+=(--run-key "$RUN_KEY"); fi
if [[ -n "${IMAGE_DIGEST:-}" ]]; then PUBLISH_CMD+=(--image-digest "$IMAGE_DIGEST"); fi
if [[ -n "$RESUME_URI" ]]; then PUBLISH_CMD+=(--resumed-from "$RESUME_URI"); fi
if (( NNODES > 1 )); then
  if [[ "$ROLE" == "main" ]]; then
    PUBLISH_CMD+=(--wait-for-manifest "$PUBLISH_WAIT_SECONDS")
  else
    PUBLISH_CMD+=(--if-present)
  fi
fi

if [[ "$DRY_RUN" == "1" ]]; then
  printf '%q ' "${CMD[@]}"
  printf '\n'
  log "dry-run: after torchrun exits 0: $(printf '%q ' "${PUBLISH_CMD[@]}")"
  exit 0
fi

if (( SKIP_TRAIN )); then
  if (( NNODES > 1 )) && [[ "$ROLE" != "main" ]]; then
    log "nothing to train; the main node publishes"
    exit 0
  fi
else
  child=""
  forward() { if [[ -n "$child" ]]; then kill -s "$1" "$child" 2>/dev/null || true; fi; }
  trap 'forward TERM' TERM
  trap 'forward INT' INT
  "${CMD[@]}" &
  child=$!
  rc=0
  while true; do
    wait "$child" && rc=0 || rc=$?
    kill -0 "$child" 2>/dev/null || break   # wait returned for a trapped signal: keep waiting for torchrun
  done
  trap - TERM INT
  if (( rc != 0 )); then
    log "torchrun exited with ${rc}: not publishing"
    exit "$rc"
  fi
fi

log "publishing ${ISAACLAB_LOG_DIR} to ${OUTPUT_URI}"
"${PUBLISH_CMD[@]}" || { rc=$?; echo "[distributed_run] error: publishing to ${OUTPUT_URI} failed (exit ${rc})" >&2; exit 1; }
exit 0
