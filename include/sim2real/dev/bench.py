"""``make bench``: measure on this machine and print one table (also written to bench-results.json).

Rows:

* DAG file parse time: median wall time of parsing ``dags/sim_to_real.py`` with a DagBag, each
  parse in a fresh interpreter (what the dag-processor pays per file), seconds; beside it the same
  figure for ``bench/provider_dag.py``, a plain Amazon-provider DAG with the same task count (the
  installed provider ships no example DAGs); and ``dags/sim_to_real.py`` parsed as the Airflow 3 dag-processor
  parses it (:func:`processor_parse`: the manager pre-imports the ``airflow.*`` modules the file names, then the
  file's own parse), quiet and with two CPU-bound processes beside it (a busy 2-core laptop);
* orchestration, from one sandbox run of the DAG (tiny training, ``SIM2REAL_POLL_SECONDS=2``), in a
  subprocess: per waiting stage, the latency from the resource reaching its terminal state (sandbox
  event time) to the next task's start (task instance ``start_date``); the worker-slot seconds the
  deferrable task held (in the worker before deferring + after resuming) against the same wait in
  poke mode (the whole wait); AWS API calls per hour of waiting (calls to that stage's service while
  its trigger waited);
* trainer env-steps/s with 1 and 8 vectorised environments (Reacher-v5, the trainer's env loop);
* policy quality after a wall-time budget (default 60 s and 120 s of training), ours (``sim2real-train``,
  NUM_ENVS 32) against Stable-Baselines3 PPO with rl-baselines3-zoo's Reacher hyper-parameters (8 envs), each
  run one after the other on this machine for the same wall time, seeds 3, 4, 5: the median success rate over
  seeds, the Wilson 95 % interval of all seeds' episodes pooled (100 evaluation episodes per seed, seeds
  2000..2099), each seed's rate and the median env-steps/s (:mod:`sim2real.workloads.bench`). ``--rl-budgets``,
  ``--rl-seeds`` and ``--only rl`` make it shorter;
* optional (``--only waits``, ``--only waits-hour``): waits by polling vs by AWS events through the Batch
  trigger, at 1, 10 and 50 concurrent waits in the sandbox: resume latency p50/p95 and triggerer CPU of short
  waits, and the AWS calls (SQS and DescribeJobs) of a waiting hour, measured time-scaled by 20
  (:mod:`sim2real.dev.bench_waits`);
* a sweep of 3 candidates (training seeds 3, 4, 5; toy training of 10 s, 10 evaluation episodes) in one DAG
  run against 3 runs of one candidate each, one after the other (each in a fresh process and sandbox account
  holding 3 nodes): wall time and AWS API calls the sandbox served (``--only sweep`` for these rows alone);
* the feedback loop (``--only feedback`` for these rows alone): ``make lint`` from an empty lint venv and again,
  ``make test-unit``, measured; the whole suite (``make test``) as a recorded measurement, labelled so, or measured
  with ``--suite`` (:mod:`sim2real.dev.bench_feedback`);
* policy server latency p50/p99 (ms) and throughput (requests/s) over real ZMQ on loopback,
  onnxruntime on CPU, serving the ONNX export of a freshly trained toy policy; and an authenticated
  client's p50/p99 under an unauthenticated flood of many-array requests from 2 other processes, beside the
  same client alone in the same run (``--only policy-flood`` for these rows alone;
  :func:`sim2real.edge.benchmark.flood_latency`);
* a tracking outage (``--only tracking``): the trainer (Reacher-v5, 4 envs, metrics sent every iteration) for a
  fixed time budget (``--tracking-budget``, default 20 s) with the local MLflow server up, then with a server
  that accepts connections and never answers from the first call; the anchor beside them: the same training
  without tracking. Iterations within the budget, the loop's own time in tracking calls, the end's wait for
  them and the job's wall time (:func:`tracking_outage`).

Numbers depend on the machine and its load; they are measurements, not test assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim2real.contract import env_vars as ev
from sim2real.contract import task_ids as ids

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root

_PARSE_SNIPPET = """
import time, sys
t = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
parse_s = time.perf_counter() - t
from airflow.serialization.serialized_objects import DagSerialization
t = time.perf_counter()
for dag in bag.dags.values():  # what the dag-processor does with every DAG it parsed
    DagSerialization.to_dict(dag)
print(parse_s, sum(len(dag.tasks) for dag in bag.dags.values()), time.perf_counter() - t)
"""


def dag_parse_seconds(path: Path, repeats: int = 5) -> dict[str, float]:
    """Median/min seconds to import Airflow and parse ``path`` in a fresh interpreter, ``repeats`` times; and the
    median seconds to serialize the parsed DAGs after it (``DagSerialization.to_dict``, what the dag-processor does
    with every DAG it parsed, and ``dag.test()`` with the DAG it runs).

    :return: ``{"median_s", "min_s", "repeats", "tasks", "serialize_median_s"}``; ``tasks`` is the number of tasks
        the parsed DAGs hold (mapped tasks counted once, task groups' tasks counted each).
    :raises subprocess.CalledProcessError: the file does not parse (import errors).
    """
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    times, tasks, serialize = [], 0, []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _PARSE_SNIPPET, str(path)], capture_output=True, text=True,
                             env=env, check=True)
        seconds, count, serialize_s = out.stdout.strip().splitlines()[-1].split()
        times.append(float(seconds))
        serialize.append(float(serialize_s))
        tasks = int(count)
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats, "tasks": tasks,
            "serialize_median_s": statistics.median(serialize)}


_PROCESSOR_PARSE_SNIPPET = """
import json, logging, sys, time
t0 = time.perf_counter()
import airflow.dag_processing.manager  # what the dag-processor's long-lived manager process has loaded
from airflow.dag_processing.dagbag import DagBag
from airflow.dag_processing.processor import _pre_import_airflow_modules
t1 = time.perf_counter()
paths = sys.argv[1:]
for path in paths:  # the manager pre-imports each file's airflow.* imports before it forks the file's parser
    _pre_import_airflow_modules(path, logging.getLogger("pre-import"))
t2 = time.perf_counter()
out = {"airflow_import_s": t1 - t0, "pre_import_s": t2 - t1, "files": {}}
for path in paths:
    seen, start = set(sys.modules), time.perf_counter()
    bag = DagBag(dag_folder=path)
    out["files"][path] = {"parse_s": time.perf_counter() - start,
                          "tasks": sum(len(dag.tasks) for dag in bag.dags.values()),
                          "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
                          "new_modules": sorted(set(sys.modules) - seen)}
out["all_modules"] = sorted(sys.modules)
print(json.dumps(out))
"""

#: Third-party packages a DAG file's parse must not import itself: the AWS SDK stack (the dag-processor's manager
#: imports it once, through the provider modules the DAG files name: ``[dag_processor] parsing_pre_import_modules``)
#: and the data/ML libraries (only ever imported inside a task).
PARSE_HEAVY_PACKAGES = ("boto3", "botocore", "s3transfer", "requests", "urllib3", "jmespath", "aiobotocore",
                        "numpy", "pandas", "matplotlib", "PIL", "scipy", "torch", "onnx", "onnxruntime",
                        "gymnasium", "mujoco", "mlflow", "zmq", "msgpack", "skrl")
#: Of those, the ones not even a cold parse (fresh interpreter, nothing pre-imported) may import.
PARSE_NEVER_PACKAGES = PARSE_HEAVY_PACKAGES[7:]


def processor_parse(paths: list[Path]) -> dict[str, Any]:
    """Parse ``paths`` in a fresh interpreter the way the Airflow 3 dag-processor does.

    The manager process has Airflow loaded and imports every ``airflow.*`` module a DAG file names at its top
    level before it forks the process that parses that file (``[dag_processor] parsing_pre_import_modules``,
    default on; ``airflow.dag_processing.processor._pre_import_airflow_modules``): what that pre-import loaded is
    free for every parse, what the parse imports itself is paid on every parse.

    :return: ``{"airflow_import_s", "pre_import_s", "files": {path: {"parse_s", "tasks", "import_errors",
        "new_modules"}}, "all_modules"}`` (seconds; ``new_modules``: imported by that file's parse; ``all_modules``:
        every module of the process at the end). Files are parsed one after the other in the one process, so a
        later file's ``new_modules`` leave out what an earlier one loaded.
    :raises subprocess.CalledProcessError: the interpreter failed.
    """
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", _PROCESSOR_PARSE_SNIPPET, *map(str, paths)], capture_output=True,
                         text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def processor_parse_seconds(path: Path, repeats: int = 5, busy: int = 0) -> dict[str, float]:
    """Median/min seconds of :func:`processor_parse` of ``path`` (the parse alone, after the pre-import), each in a
    fresh interpreter, with ``busy`` CPU-bound processes running beside it (0: none).

    :return: ``{"median_s", "min_s", "repeats", "busy"}``.
    """
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        times = [processor_parse([path])["files"][str(path)]["parse_s"] for _ in range(repeats)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats, "busy": busy}


#: waiting task -> (services whose calls are its polls, sandbox event marking the terminal state,
#: event data filter) — the event with the latest time among matches is the terminal one.
WAITS: dict[str, tuple[tuple[str, ...], str, str, dict[str, Any]]] = {
    ids.BUILD_IMAGE: (("codebuild",), "codebuild", "build-status", {"status": "SUCCEEDED"}),
    ids.BATCH_TRAIN_POLICY: (("batch", "logs"), "batch", "job-done", {"status": "SUCCEEDED"}),
    ids.WAIT_FOR_CHECKPOINT: (("s3",), "", "", {}),
    ids.RUN_EVALUATION: (("ssm",), "ssm", "command-done", {"status": "Success"}),
    ids.FINETUNE_GROOT: (("sagemaker",), "sagemaker", "pipeline-status", {"status": "Succeeded"}),
    ids.WAIT_FOR_APPROVAL: (("sagemaker",), "approver", "decision", {"decision": "Approved"}),
    ids.DEPLOY_TO_ROBOTS: (("greengrassv2", "iot"), "greengrass", "device-status", {"status": "SUCCEEDED"}),
}


def orchestration_run(out: Path, poll_seconds: int = 2) -> dict[str, Any]:
    """One sandbox run of ``sim_to_real`` (this process becomes the Airflow process), instrumented.

    Worker segments: every ``run_task_in_process`` call of ``dag.test`` (one per try, and one more
    after each resume). Wait segments: every inline trigger run. Both on the ``time.time()`` clock of
    the sandbox's events and request log.
    """
    import datetime as dt
    import time

    os.environ["SIM2REAL_POLL_SECONDS"] = str(poll_seconds)
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    from sim2real.dev.demo import load_dag, prepare_airflow_home
    from sim2real.dev.sandbox import Approver, Sandbox

    home = Path(tempfile.mkdtemp(prefix="sim2real-bench-"))
    segments: list[tuple[str, str, float, float]] = []  # (task_id, "worker"|"wait", start, end)
    conf = {"max_iterations": 2, "train_time_budget_seconds": 0, "eval_episodes": 3, "min_success_rate": 0.0,
            "seed": 5, "eval_seed": 4000}
    with Sandbox(repo_root=REPO_ROOT) as sandbox:
        env_config = sandbox.provision()
        prepare_airflow_home(home, sandbox.airflow_env())
        import airflow.sdk.definitions.dag as dag_module
        import airflow.sdk.execution_time.supervisor as supervisor
        original_run, original_trigger = supervisor.run_task_in_process, dag_module._run_inline_trigger

        def run_task_in_process(*args, **kwargs):
            ti = kwargs.get("ti") or args[0]
            start = time.time()
            try:
                return original_run(*args, **kwargs)
            finally:
                segments.append((ti.task_id, "worker", start, time.time()))

        def run_inline_trigger(trigger, task_sdk_ti):
            start = time.time()
            try:
                return original_trigger(trigger, task_sdk_ti)
            finally:
                segments.append((task_sdk_ti.task_id, "wait", start, time.time()))

        supervisor.run_task_in_process = run_task_in_process
        dag_module._run_inline_trigger = run_inline_trigger
        dag = load_dag()
        approver = Approver(sandbox, model_package_group=env_config["sagemaker"]["model_package_group"],
                            decision="Approved", description="approved by the benchmark's emulated reviewer")
        approver.start()
        try:
            dag_run = dag.test(run_conf=conf)
        finally:
            approver.cancel()
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            tis = {ti.task_id: (ti.start_date, ti.end_date, str(getattr(ti.state, "value", ti.state)))
                   for ti in session.scalars(select(TaskInstance).where(
                       TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)).all()}
        events = list(sandbox.events)
        requests = sandbox.requests.since(0)
        state = str(getattr(dag_run.state, "value", dag_run.state))
    shutil.rmtree(home, ignore_errors=True)

    def ts(value: dt.datetime | None) -> float | None:
        return value.timestamp() if value else None

    stages: dict[str, Any] = {}
    for task_id, (services, ev_service, ev_kind, ev_data) in WAITS.items():
        worker = sum(e - s for t, k, s, e in segments if t == task_id and k == "worker")
        waits = [(s, e) for t, k, s, e in segments if t == task_id and k == "wait"]
        wait_s = sum(e - s for s, e in waits)
        calls = sum(1 for r in requests if r.service in services and any(s <= r.time <= e for s, e in waits))
        entry: dict[str, Any] = {
            "worker_slot_s_deferrable": round(worker, 2), "wait_s": round(wait_s, 2),
            "worker_slot_s_poke": round(worker + wait_s, 2), "deferred": bool(waits),
            "api_calls_while_waiting": calls,
            "api_calls_per_hour_waiting": round(calls / wait_s * 3600) if wait_s > 0 else None,
        }
        nexts = [ts(tis[d][0]) for d in dag.task_dict[task_id].downstream_task_ids if d in tis and tis[d][0]]
        next_start = min(nexts) if nexts else None
        if ev_service and next_start:
            matches = [ev.time for ev in events if ev.service == ev_service and ev.kind == ev_kind
                       and all(ev.data.get(k) == v for k, v in ev_data.items()) and ev.time <= next_start]
            if matches:
                terminal = max(matches)
                resumed = max((e for s, e in waits), default=None)
                entry["terminal_to_next_start_s"] = round(next_start - terminal, 2)
                if resumed:
                    entry["terminal_to_trigger_fired_s"] = round(max(resumed - terminal, 0.0), 2)
        entry["next_task"] = ([d for d in dag.task_dict[task_id].downstream_task_ids
                               if d in tis and ts(tis[d][0]) == next_start] or [None])[0]
        stages[task_id] = entry
    result = {"state": state, "poll_seconds": poll_seconds, "stages": stages,
              "tasks": {t: {"state": v[2], "start": ts(v[0]), "end": ts(v[1])} for t, v in tis.items()}}
    out.write_text(json.dumps(result, indent=2))
    return result


#: The sweep rows' runs: toy training (seconds), few episodes, the gate open (the rows time the orchestration).
SWEEP_BENCH_CONF = {"train_time_budget_seconds": 10, "eval_episodes": 10, "min_success_rate": 0.0, "eval_seed": 4000}
SWEEP_BENCH_SEEDS = (3, 4, 5)


def sweep_bench_run(out: Path, *, sweep: bool, seed: int) -> dict[str, Any]:
    """One sandbox run of ``sim_to_real`` (this process becomes the Airflow process): a sweep of
    :data:`SWEEP_BENCH_SEEDS` (``sweep``) or one training seed, timed from ``dag.test`` to its end.

    The sandbox account holds one node per candidate in both cases (quota and compute environment), so the only
    difference is the run. AWS API calls: every request the sandbox served during ``dag.test``, by service.
    """
    import time

    os.environ.setdefault("SIM2REAL_POLL_SECONDS", "2")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    from sim2real.dev.demo import load_dag, prepare_airflow_home, sweep_conf
    from sim2real.dev.sandbox import Approver, Sandbox

    nodes = len(SWEEP_BENCH_SEEDS)
    conf = {**SWEEP_BENCH_CONF, "seed": seed, **(sweep_conf(SWEEP_BENCH_SEEDS[0], nodes) if sweep else {})}
    home = Path(tempfile.mkdtemp(prefix="sim2real-bench-sweep-"))
    with Sandbox(repo_root=REPO_ROOT, mlflow=False, quota_limits={"L-DB2E81BA": 48.0 * nodes}) as sandbox:
        env_config = sandbox.provision(max_vcpus=48 * nodes)
        prepare_airflow_home(home, sandbox.airflow_env())
        dag = load_dag()
        approver = Approver(sandbox, model_package_group=env_config["sagemaker"]["model_package_group"],
                            decision="Approved", description="approved by the benchmark's emulated reviewer")
        approver.start()
        started = time.time()
        try:
            dag_run = dag.test(run_conf=conf)
        finally:
            approver.cancel()
        wall = time.time() - started
        calls: dict[str, int] = {}
        for r in sandbox.requests.since(started):
            calls[r.service] = calls.get(r.service, 0) + 1
        state = str(getattr(dag_run.state, "value", dag_run.state))
    shutil.rmtree(home, ignore_errors=True)
    result = {"state": state, "wall_s": round(wall, 1), "api_calls": sum(calls.values()), "calls_by_service": calls,
              "sweep": sweep, "seed": seed}
    out.write_text(json.dumps(result, indent=2))
    return result


def _sweep_subprocess(*, sweep: bool, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "sweep.json")
        cmd = [sys.executable, "-m", "sim2real.dev.bench", "--sweep-run", str(out), str(seed), "1" if sweep else "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if not out.exists():
            raise RuntimeError("sweep bench run failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
        return json.loads(out.read_text())


def sweep_comparison() -> dict[str, Any]:
    """A sweep of :data:`SWEEP_BENCH_SEEDS` in one DAG run against one run per seed, one after the other
    (each in a fresh process and sandbox): wall time and AWS API calls."""
    swept = _sweep_subprocess(sweep=True, seed=SWEEP_BENCH_SEEDS[0])
    singles = [_sweep_subprocess(sweep=False, seed=s) for s in SWEEP_BENCH_SEEDS]
    return {"sweep": swept, "sequential": singles,
            "sequential_wall_s": round(sum(r["wall_s"] for r in singles), 1),
            "sequential_api_calls": sum(r["api_calls"] for r in singles)}


def _sweep_rows(cmp: dict[str, Any]) -> list[tuple[str, str]]:
    n = len(cmp["sequential"])
    swept, states = cmp["sweep"], {r["state"] for r in cmp["sequential"]}
    return [
        (f"sweep of {n} candidates in one DAG run (toy training 10 s, 10 episodes): wall time / AWS API calls",
         f"{swept['wall_s']:.0f} s / {swept['api_calls']} (run {swept['state']})"),
        (f"anchor: {n} runs of one candidate each, one after the other: wall time / AWS API calls",
         f"{cmp['sequential_wall_s']:.0f} s / {cmp['sequential_api_calls']} (runs {', '.join(sorted(states))})"),
    ]


def _toy_policy_onnx(tmp: str) -> str:
    """Train a 1-iteration toy policy in ``tmp`` and export it to ONNX; returns the .onnx path."""
    from sim2real.workloads.export import export_onnx

    env = {**os.environ, ev.TASK: "Reacher-v5", ev.MAX_ITERATIONS: "1", ev.NUM_ENVS: "2", ev.OUTPUT_URI: tmp}
    env.pop("AWS_ENDPOINT_URL", None)
    subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, check=True, capture_output=True)
    manifest = json.loads(Path(tmp, "manifest.json").read_text())
    onnx_path = str(Path(tmp, "policy.onnx"))
    export_onnx(str(Path(tmp, manifest["checkpoint_uri"].rsplit("/", 1)[-1])), onnx_path)
    return onnx_path


def policy_latency(n: int = 1000) -> dict[str, Any]:
    """Train a 1-iteration toy policy, export it to ONNX and measure the policy server over ZMQ."""
    from sim2real.edge.benchmark import policy_server_latency

    with tempfile.TemporaryDirectory() as tmp:
        return policy_server_latency(_toy_policy_onnx(tmp), n=n)


def policy_flood() -> dict[str, Any]:
    """The toy policy's server: an authenticated client alone, then under an unauthenticated many-array flood
    from 2 other processes (:func:`sim2real.edge.benchmark.flood_latency`)."""
    from sim2real.edge.benchmark import flood_latency

    with tempfile.TemporaryDirectory() as tmp:
        return flood_latency(_toy_policy_onnx(tmp))


def _flood_rows(f: dict[str, Any]) -> list[tuple[str, str]]:
    within = f["flood"]["p99_ms"] < f["decode_ms"]
    return [
        (f"policy server get_action p50 / p99 under an unauthenticated flood ({f['flooders']} processes, requests of "
         f"{f['flood_arrays']} arrays, {f['flood_request_bytes'] / 2**20:.1f} MiB; {f['flood_rps']:.0f} refused/s)",
         f"{f['flood']['p50_ms']:.2f} / {f['flood']['p99_ms']:.2f} ms ({'within' if within else 'OVER'} the bound: "
         f"p99 < one decode of a flood request, {f['decode_ms']:.0f} ms)"),
        ("anchor: the same client alone, same server, same run (p50 / p99)",
         f"{f['alone']['p50_ms']:.2f} / {f['alone']['p99_ms']:.2f} ms (refusing one flood request: "
         f"{f['refuse_ms']:.2f} ms)"),
    ]


def _parse_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    ours, anchor = results["dag_parse"], results["provider_dag_parse"]
    return [
        (f"DAG parse, dags/sim_to_real.py ({ours['tasks']} tasks; fresh interpreter, median of 5)",
         f"{ours['median_s']:.2f} s"),
        (f"DAG parse, bench/provider_dag.py (plain provider operators, {anchor['tasks']} tasks)",
         f"{anchor['median_s']:.2f} s"),
        ("DAG serialization after the parse (dag-processor, dag.test()), dags/sim_to_real.py, median of 5",
         f"{ours['serialize_median_s']:.2f} s"),
        ("DAG serialization after the parse, bench/provider_dag.py, median of 5",
         f"{anchor['serialize_median_s']:.2f} s"),
    ]


def _orchestration_subprocess() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "orchestration.json")
        proc = subprocess.run([sys.executable, "-m", "sim2real.dev.bench", "--orchestration-run", str(out)],
                              capture_output=True, text=True, timeout=600)
        if not out.exists():
            raise RuntimeError("orchestration run failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
        return json.loads(out.read_text())


def _machine() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPU ({cpu}), Python {platform.python_version()}, {platform.system()}"


#: (label, trainer, NUM_ENVS) of the policy-quality rows.
RL_TRAINERS = (("ours (skrl PPO)", "ours", 32), ("Stable-Baselines3 PPO, rl-zoo hyper-parameters", "sb3", 8))


def policy_quality(*, task: str = "Reacher-v5", budgets: list[float], seeds: list[int]) -> dict[str, Any]:
    """Train each of :data:`RL_TRAINERS` once per seed for ``max(budgets)`` seconds; success at every budget.

    :return: ``{"task", "budgets", "seeds", "runs": [per-run results], "summary": {trainer: {budget: {...}}}}``;
        a summary entry holds ``median``, ``per_seed``, the pooled ``successes``/``episodes`` and ``ci95``
        (Wilson) and the median ``env_steps_per_s``.
    """
    from sim2real.contract.stats import wilson_interval
    from sim2real.workloads.bench import EVAL_EPISODES, EVAL_SEED, train_ours, train_sb3

    eval_seeds = list(range(EVAL_SEED, EVAL_SEED + EVAL_EPISODES))
    runs, summary = [], {}
    for label, trainer, num_envs in RL_TRAINERS:
        train = train_ours if trainer == "ours" else train_sb3
        mine = [train(task=task, num_envs=num_envs, seed=seed, seconds=max(budgets), snapshots=budgets,
                      eval_seeds=eval_seeds) for seed in seeds]
        runs += mine
        per_budget = {}
        for budget in budgets:
            snaps = [next(s for s in r["snapshots"] if s["at_s"] == budget) for r in mine]
            k, n = sum(s["successes"] for s in snaps), sum(s["episodes"] for s in snaps)
            per_budget[str(budget)] = {"median": statistics.median(s["success_rate"] for s in snaps),
                                       "per_seed": [s["success_rate"] for s in snaps], "successes": k,
                                       "episodes": n, "ci95": list(wilson_interval(k, n))}
        summary[trainer] = {"label": label, "num_envs": num_envs, "budgets": per_budget,
                            "env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in mine)}
    return {"task": task, "budgets": budgets, "seeds": seeds, "runs": runs, "summary": summary}


def _quality_rows(quality: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    seeds = "/".join(str(s) for s in quality["seeds"])
    for entry in quality["summary"].values():
        for budget, b in entry["budgets"].items():
            rows.append(((f"{quality['task']} success after {float(budget):g} s of training, {entry['label']}, "
                          f"{entry['num_envs']} envs: median [pooled Wilson 95%]; seeds {seeds}"),
                         (f"{b['median']:.2f} [{b['ci95'][0]:.2f}, {b['ci95'][1]:.2f}]; "
                          + " / ".join(f"{x:.2f}" for x in b["per_seed"]))))
        rows.append(((f"{quality['task']} env-steps/s while training, {entry['label']}, {entry['num_envs']} envs "
                      "(median of seeds)"), f"{entry['env_steps_per_s']:.0f}"))
    return rows


def _parse_main(argv: list[str]):
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.bench", description="make bench")
    ap.add_argument("--only", choices=("all", "rl", "waits", "waits-hour", "sweep", "policy-flood", "tracking",
                                       "feedback", "parse"), default="all",
                    help="rl: only the policy-quality rows (ours vs Stable-Baselines3); waits: only the wait rows, "
                         "polling vs events (sim2real.dev.bench_waits, 1/10/50 concurrent Batch waits in the sandbox: "
                         "short waits, then the waiting hour time-scaled by 20); waits-hour: only the waiting-hour "
                         "rows; "
                         "sweep: only the rows of a 3-candidate sweep against 3 runs one after the other; "
                         "policy-flood: only the policy server rows alone vs under an unauthenticated flood; "
                         "tracking: only the rows of training with MLflow up, down and off; "
                         "feedback: only make lint (from an empty lint venv) and make test-unit, measured "
                         "(sim2real.dev.bench_feedback); "
                         "parse: only the DAG parse and serialization rows, ours beside the plain-provider DAG")
    ap.add_argument("--tracking-budget", type=float, default=20.0, help="training seconds of the tracking rows")
    ap.add_argument("--suite", action="store_true",
                    help="with the feedback rows, also measure make test (the whole suite); otherwise its row is "
                         "the recorded measurement, labelled so")
    ap.add_argument("--rl-budgets", default="60,120", help="training seconds at which success is measured")
    ap.add_argument("--rl-seeds", default="3,4,5", help="training seeds of each trainer")
    args = ap.parse_args(argv)
    args.rl_budgets = [float(x) for x in args.rl_budgets.split(",") if x.strip()]
    args.rl_seeds = [int(x) for x in args.rl_seeds.split(",") if x.strip()]
    if not args.rl_budgets or min(args.rl_budgets) <= 0 or not args.rl_seeds:
        ap.error("--rl-budgets needs positive seconds and --rl-seeds at least one seed")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--orchestration-run"]:
        orchestration_run(Path(argv[1]))
        return 0
    if argv[:1] == ["--sweep-run"]:
        sweep_bench_run(Path(argv[1]), seed=int(argv[2]), sweep=argv[3] == "1")
        return 0
    args = _parse_main(argv)
    from sim2real.workloads.bench import env_steps_per_second

    results: dict[str, Any] = {"machine": _machine()}
    if args.only in ("waits", "waits-hour"):
        from sim2real.dev import bench_waits

        rows = []
        if args.only == "waits":
            results["wait_events"] = bench_waits.run([1, 10, 50])
            rows += bench_waits.rows(results["wait_events"])
        results["wait_events_hour"] = bench_waits.run_hour([1, 10, 50])
        rows += bench_waits.hour_rows(results["wait_events_hour"])
        return _print_and_write(results, rows, "wait events only (sandbox)")
    if args.only == "sweep":
        results["sweep"] = sweep_comparison()
        return _print_and_write(results, _sweep_rows(results["sweep"]), "sweep only (sandbox)")
    if args.only == "policy-flood":
        results["policy_flood"] = policy_flood()
        return _print_and_write(results, _flood_rows(results["policy_flood"]), "policy server flood only")
    if args.only == "tracking":
        results["tracking_outage"] = tracking_outage(args.tracking_budget)
        return _print_and_write(results, _tracking_rows(results["tracking_outage"]), "tracking outage only")
    if args.only == "feedback":
        from sim2real.dev import bench_feedback

        results["feedback"] = bench_feedback.measure(suite=args.suite)
        return _print_and_write(results, bench_feedback.rows(results["feedback"]), "feedback loop only")
    if args.only == "rl":
        results["policy_quality"] = policy_quality(budgets=args.rl_budgets, seeds=args.rl_seeds)
        rows = _quality_rows(results["policy_quality"])
        return _print_and_write(results, rows, "policy quality only")
    results["dag_parse"] = dag_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py")
    results["provider_dag_parse"] = dag_parse_seconds(REPO_ROOT / "bench" / "provider_dag.py")
    if args.only == "parse":
        return _print_and_write(results, _parse_rows(results), "DAG parse and serialization only")
    results["dag_parse_processor"] = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py")
    results["dag_parse_processor_busy"] = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py", repeats=3,
                                                                  busy=2)
    results["orchestration"] = _orchestration_subprocess()
    results["env_steps_per_s"] = {str(n): env_steps_per_second(n, seconds=5.0) for n in (1, 8)}
    results["policy_server"] = policy_latency()
    results["policy_flood"] = policy_flood()
    results["policy_quality"] = policy_quality(budgets=args.rl_budgets, seeds=args.rl_seeds)
    orch = results["orchestration"]
    rows = [
        *_parse_rows(results),
        ("DAG parse, dags/sim_to_real.py as the dag-processor parses it (after its pre-import), median of 5",
         f"{results['dag_parse_processor']['median_s']:.2f} s"),
        ("DAG parse, dags/sim_to_real.py as the dag-processor parses it, 2 CPU-bound processes beside it, median of 3",
         f"{results['dag_parse_processor_busy']['median_s']:.2f} s"),
    ]
    for task_id, st in orch["stages"].items():
        if "terminal_to_next_start_s" in st:
            rows.append((f"latency: {task_id} resource terminal -> {st['next_task']} starts (poll {orch['poll_seconds']} s)",
                         f"{st['terminal_to_next_start_s']:.1f} s"))
    for task_id, st in orch["stages"].items():
        if st["deferred"]:
            rows.append((f"worker slot: {task_id} deferrable / poke (whole wait)",
                         f"{st['worker_slot_s_deferrable']:.1f} s / {st['worker_slot_s_poke']:.1f} s"))
    for task_id, st in orch["stages"].items():
        if st["deferred"] and st["api_calls_per_hour_waiting"] is not None:
            scaled = st["api_calls_per_hour_waiting"] * orch["poll_seconds"] / 30
            rows.append((f"API calls per hour of waiting: {task_id}",
                         f"{st['api_calls_per_hour_waiting']:.0f} at poll {orch['poll_seconds']} s "
                         f"(~{scaled:.0f} at 30 s; {st['api_calls_while_waiting']} in {st['wait_s']:.1f} s)"))
    rows += [
        ("trainer env-steps/s, 1 env", f"{results['env_steps_per_s']['1']:.0f}"),
        ("trainer env-steps/s, 8 envs", f"{results['env_steps_per_s']['8']:.0f}"),
        ("policy server p50 / p99 (ZMQ, onnxruntime CPU)",
         f"{results['policy_server']['p50_ms']:.2f} / {results['policy_server']['p99_ms']:.2f} ms"),
        ("policy server throughput", f"{results['policy_server']['throughput_rps']:.0f} req/s"),
        ("anchor: ZMQ REQ/REP round trip of the same message sizes, no server work (p50 / p99)",
         "{p50_ms:.2f} / {p99_ms:.2f} ms".format(**results["policy_server"]["transport"])),
        *_flood_rows(results["policy_flood"]),
    ]
    rows += _quality_rows(results["policy_quality"])
    results["sweep"] = sweep_comparison()
    rows += _sweep_rows(results["sweep"])
    results["tracking_outage"] = tracking_outage(args.tracking_budget)
    rows += _tracking_rows(results["tracking_outage"])
    from sim2real.dev import bench_feedback

    results["feedback"] = bench_feedback.measure(suite=args.suite)
    rows += bench_feedback.rows(results["feedback"])
    return _print_and_write(results, rows, f"sandbox run: {orch['state']}")


def _train_once(out: Path, budget_s: float, env_extra: dict[str, str]) -> dict[str, Any]:
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SIM2REAL_MLFLOW_"))}
    env.update({ev.TASK: "Reacher-v5", ev.MAX_ITERATIONS: "100000", ev.NUM_ENVS: "4", ev.OUTPUT_URI: str(out),
                "TIME_BUDGET_SECONDS": str(budget_s), "CHECKPOINT_INTERVAL": "100000", ev.RUN_KEY: "bench-tracking",
                ev.MLFLOW_FLUSH_EVERY: "1", "PYTHONPATH": str(REPO_ROOT / "include"), **env_extra})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, capture_output=True,
                          text=True, timeout=budget_s + 600)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError("bench training failed:\n" + proc.stderr[-3000:])
    manifest = json.loads((out / "manifest.json").read_text())
    tracking = manifest.get("tracking") or {}
    return {"iterations": manifest["iteration"], "wall_s": round(wall, 1), "caller_s": tracking.get("caller_s"),
            "close_wait_s": tracking.get("close_wait_s"), "not_recorded": tracking.get("not_recorded")}


def tracking_outage(budget_s: float = 20.0) -> dict[str, Any]:
    """The trainer for ``budget_s`` seconds with MLflow up (the local server), down (a socket that never answers,
    from the first call) and off (the anchor); see the module docstring.

    :return: ``{"budget_s", "up", "down", "off"}``, each ``{"iterations", "wall_s", "caller_s", "close_wait_s",
        "not_recorded"}`` (``up`` is ``{"skipped": reason}`` without the MLflow server venv).
    """
    import socket

    from sim2real.dev.sandbox.mlflow_server import MlflowServer, MlflowServerError

    results: dict[str, Any] = {"budget_s": budget_s}
    with tempfile.TemporaryDirectory(prefix="sim2real-bench-tracking-") as tmp:
        results["off"] = _train_once(Path(tmp, "off"), budget_s, {})
        try:
            server = MlflowServer(repo_root=REPO_ROOT, work_dir=Path(tmp, "mlflow"),
                                  artifacts_destination=Path(tmp, "artifacts").as_uri(), s3_endpoint_url="",
                                  aws_env={}).start()
        except MlflowServerError as err:
            results["up"] = {"skipped": str(err).splitlines()[0]}
        else:
            try:
                results["up"] = _train_once(Path(tmp, "up"), budget_s, {ev.MLFLOW_TRACKING_URI: server.url})
            finally:
                server.stop()
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(128)
        try:
            results["down"] = _train_once(Path(tmp, "down"), budget_s, {
                ev.MLFLOW_TRACKING_URI: f"http://127.0.0.1:{hole.getsockname()[1]}"})
        finally:
            hole.close()
    return results


def _tracking_rows(res: dict[str, Any]) -> list[tuple[str, str]]:
    def cell(r: dict[str, Any]) -> str:
        if "skipped" in r:
            return f"skipped ({r['skipped']})"
        return (f"{r['iterations']} it (loop in tracking {r['caller_s'] * 1000:.0f} ms, end waited {r['close_wait_s']:.1f} s, "
                f"job {r['wall_s']:.0f} s)")

    b = res["budget_s"]
    return [(f"training iterations in a {b:.0f} s budget, MLflow up / down from the first call (hanging server)",
             f"{cell(res['up'])} / {cell(res['down'])}"),
            (f"anchor: the same training without tracking, {b:.0f} s budget",
             f"{res['off']['iterations']} it (job {res['off']['wall_s']:.0f} s)")]


def _print_and_write(results: dict[str, Any], rows: list[tuple[str, str]], note: str) -> int:
    results["table"] = rows
    width = max(len(r[0]) for r in rows)
    print(f"\nmachine: {results['machine']}; {note}")
    print(f"| {'benchmark'.ljust(width)} | result |\n|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    out = REPO_ROOT / "bench-results.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
