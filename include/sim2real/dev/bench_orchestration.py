"""``make bench``'s orchestration rows: one sandbox run of the DAG (wait latencies, worker-slot seconds, API calls
per waiting hour) and the sweep against one run per candidate (wall time, API calls).

Each run is made in a subprocess (``python -m sim2real.dev.bench --orchestration-run`` / ``--sweep-run``, so every
one has a fresh process and sandbox): :func:`orchestration_run` and :func:`sweep_bench_run` are what those
subprocesses run, :func:`_orchestration_subprocess` and :func:`sweep_comparison` start them. The table and its
other rows: :mod:`sim2real.dev.bench`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim2real.contract import task_ids as ids

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root

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
        prepare_airflow_home(home, sandbox.airflow_env(), process_caches=False)  # a task as MWAA runs it
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
        prepare_airflow_home(home, sandbox.airflow_env(), process_caches=False)  # a task as MWAA runs it
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


def _orchestration_subprocess() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "orchestration.json")
        proc = subprocess.run([sys.executable, "-m", "sim2real.dev.bench", "--orchestration-run", str(out)],
                              capture_output=True, text=True, timeout=600)
        if not out.exists():
            raise RuntimeError("orchestration run failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
        return json.loads(out.read_text())
