#!/usr/bin/env bash
# gpu_check.bash — real NCCL runs of the launcher (distributed_run.bash → torchrun → sim2real.workloads.train)
# on 1 and 2 GPUs of one node: env-steps/s of each, and the per-rank policy/value parameter digests after
# PPO updates, which must be identical across ranks.
#
# Run from the repository root on a machine with >= 2 NVIDIA GPUs:
#   OUT=/tmp/gpu-check bash containers/rl/gpu_check.bash
# Python needs torch with CUDA, skrl, gymnasium and mujoco. When a folder .whl/ of wheels is there (for a machine
# with no package index) and those packages are not importable, the wheels are installed into /tmp/site first
# (pip --no-index --no-deps --target).
#
# Environment (all optional):
#   OUT               folder for logs and summary.txt (default /tmp/gpu-check)
#   TASK              gymnasium task (default Reacher-v5)
#   NUM_ENVS          environments per rank (default 256)
#   MAX_ITERATIONS    PPO iterations per run (default 15)
#   DIGEST_INTERVAL   iterations between digest checks (default 5; the last iteration is always checked)
#   RUN_BUDGET_S      TIME_BUDGET_SECONDS of each run, a guard (default 120; killed 60 s after it)
#   EXTRA_RUNS        1 (default): also 2 GPUs with NUM_ENVS/2 each (same total) and one CPU process; 0: skip
#   EXTRA_DEADLINE_S  skip the extra runs when the script has run longer than this (default 300)
#
# Prints one summary table; exit code 0 only when both GPU runs succeeded, ranks 0/1 used cuda:0/cuda:1, every
# digest check says params_match=true, and only rank 0 wrote to OUTPUT_URI.
set -uo pipefail

OUT="${OUT:-/tmp/gpu-check}"
TASK="${TASK:-Reacher-v5}"
NUM_ENVS="${NUM_ENVS:-256}"
MAX_ITERATIONS="${MAX_ITERATIONS:-15}"
DIGEST_INTERVAL="${DIGEST_INTERVAL:-5}"
RUN_BUDGET_S="${RUN_BUDGET_S:-120}"
EXTRA_RUNS="${EXTRA_RUNS:-1}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LAUNCHER="${REPO}/containers/rl/distributed_run.bash"
mkdir -p "$OUT"
SUMMARY="${OUT}/summary.txt"
: > "$SUMMARY"

# NVLink multicast stays off (NCCL NVLS, PyTorch symmetric memory, NVSHMEM) in every process started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}"
unset MUJOCO_GL  # no rendering: MuJoCo needs no GL context for stepping

say() { echo "$*" | tee -a "$SUMMARY"; }
failures=0
fail() { say "FAIL: $*"; failures=$((failures + 1)); }

if ! "$PYTHON" -c "import skrl, gymnasium, mujoco" 2>/dev/null && compgen -G "${REPO}/.whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${REPO}"/.whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:${PYTHONPATH}}"
fi
export PYTHONPATH="${REPO}/include${PYTHONPATH:+:${PYTHONPATH}}"

{
  nvidia-smi
  nvidia-smi topo -m
  nproc
  "$PYTHON" - <<'EOF'
import importlib.metadata as md, platform, torch
nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", nccl, "gpus", torch.cuda.device_count())
for name in ("skrl", "gymnasium", "mujoco", "numpy"):
    print(name, md.version(name))
EOF
} > "${OUT}/machine.txt" 2>&1
cat "${OUT}/machine.txt"

# run NAME PROCS NUM_ENVS [VAR=value...]: one launcher run; log in $OUT/NAME.log, output dir /tmp/gpu-check-runs/NAME
run() {
  local name="$1" procs="$2" envs="$3"; shift 3
  local dir="/tmp/gpu-check-runs/${name}" log="${OUT}/${name}.log"
  rm -rf "$dir"
  local cmd=(env "$@" PROC_PER_NODE="$procs" TASK="$TASK" NUM_ENVS="$envs" MAX_ITERATIONS="$MAX_ITERATIONS"
    DIGEST_INTERVAL="$DIGEST_INTERVAL" OUTPUT_URI="$dir" CHECKPOINT_INTERVAL="$MAX_ITERATIONS" SEED=7
    TIME_BUDGET_SECONDS="$RUN_BUDGET_S" RDZV_PORT=$((29500 + RANDOM % 1000)) bash "$LAUNCHER")
  echo "+ ${cmd[*]}" > "$log"
  local t0=$SECONDS
  timeout $((RUN_BUDGET_S + 60)) "${cmd[@]}" >> "$log" 2>&1
  local rc=$?
  echo "rc=${rc} wall_s=$((SECONDS - t0))" >> "$log"
  echo "== ${name}: rc=${rc} launcher wall_s=$((SECONDS - t0))"
  { echo "-- files under OUTPUT_URI of ${name}:"; (cd "$dir" 2>/dev/null && find . -type f | sort); } >> "$log"
  return $rc
}

# check NAME WORLD: parse NAME.log; print its line of the summary table; assert devices, digests, single writer
check() {
  local name="$1" world="$2"
  local log="${OUT}/${name}.log" dir="/tmp/gpu-check-runs/${name}"
  local tp
  tp="$(grep -m1 '^\[sim2real\] throughput ' "$log" || true)"
  if [[ -z "$tp" ]]; then fail "${name}: no throughput line (see ${name}.log)"; return; fi
  say "${name}: ${tp#\[sim2real\] throughput }"
  grep -E '^\[sim2real\] (rank=[0-9]+ local_rank=|rank=[0-9]+ iteration=|digests )' "$log" | sort -s -k2,2 \
    | sed 's/^/    /' | tee -a "$SUMMARY"
  grep -q '^\[sim2real\] error' "$log" && fail "${name}: trainer error"
  if [[ "$world" -gt 1 ]]; then
    local r
    for ((r = 0; r < world; r++)); do
      grep -q "^\[sim2real\] rank=${r} local_rank=${r} world_size=${world} device=cuda:${r}\$" "$log" \
        || fail "${name}: rank ${r} not on cuda:${r}"
    done
    local checks bad
    checks="$(grep -c '^\[sim2real\] digests .*params_match=true' "$log")"
    bad="$(grep -c '^\[sim2real\] digests .*params_match=false' "$log")"
    [[ "$checks" -ge 1 && "$bad" -eq 0 ]] || fail "${name}: params_match true=${checks} false=${bad}"
    # the same check without trusting the in-process comparison: one distinct digest per iteration
    local distinct
    distinct="$(grep -oE '^\[sim2real\] rank=[0-9]+ iteration=[0-9]+ params_sha256=[0-9a-f]+' "$log" \
      | awk '{print $3, $4}' | sort -u | awk '{print $1}' | uniq -d | wc -l)"
    [[ "$distinct" -eq 0 ]] || fail "${name}: ${distinct} iteration(s) with differing params_sha256 across ranks"
    say "    ${name}: digest checks with params_match=true: ${checks}, false: ${bad}"
  fi
  local manifests events
  manifests="$(find "$dir" -name manifest.json | wc -l)"
  events="$(find "$dir" -name 'events.out.tfevents.*' | wc -l)"
  [[ "$manifests" -eq 1 && "$events" -eq 1 ]] || fail "${name}: expected 1 manifest and 1 event file (rank 0 only), got ${manifests}/${events}"
}

say "task=${TASK} num_envs_per_rank=${NUM_ENVS} max_iterations=${MAX_ITERATIONS} digest_interval=${DIGEST_INTERVAL}"
run gpu1 1 "$NUM_ENVS" CUDA_VISIBLE_DEVICES=0 || fail "gpu1 exited non-zero"
check gpu1 1
run gpu2 2 "$NUM_ENVS" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT || fail "gpu2 exited non-zero"
check gpu2 2
grep -E 'NCCL INFO (Channel 00/0|NCCL version|comm 0x.* rank 0 nranks)' "${OUT}/gpu2.log" | head -4 | sed 's/^/    /' \
  | tee -a "$SUMMARY"
if [[ "$EXTRA_RUNS" == "1" && $SECONDS -gt ${EXTRA_DEADLINE_S:-300} ]]; then
  say "skipping the extra runs: ${SECONDS}s elapsed (EXTRA_DEADLINE_S=${EXTRA_DEADLINE_S:-300})"
elif [[ "$EXTRA_RUNS" == "1" ]]; then
  half=$((NUM_ENVS / 2))
  run gpu2_half 2 "$half" || fail "gpu2_half exited non-zero"
  check gpu2_half 2
  run cpu1 1 "$NUM_ENVS" DEVICE=cpu CUDA_VISIBLE_DEVICES= || fail "cpu1 exited non-zero"
  check cpu1 1
fi
say "failures=${failures}"
exit $(( failures > 0 ))
