"""Fault replay: run the real ``sim_to_real`` DAG against the sandbox once per injected fault
and check that each run ends the way it must.

All scenarios share one process, one sandbox, one Airflow home (SQLite) and one DagBag; each is
one ``dag.test()`` run with tiny training (2 PPO iterations, no time budget, 3 evaluation episodes),
``SIM2REAL_POLL_SECONDS=1``, ``SIM2REAL_RETRY_DELAY_SECONDS=1`` and the sandbox's emulated status steps
:data:`STEP_SECONDS` apart (as the end-to-end tests: no scenario's check depends on how long a step lasts). After each run the sandbox is
asked what is still going on: Batch jobs, SSM commands, pipeline executions and Greengrass
deployments the run started must all be in a terminal state (terminated / cancelled / stopped),
the teardowns must have run, and no second training job may exist.

Usage::

    python -m sim2real.dev.faults --json-out faults.json           # run every scenario
    python -m sim2real.dev.faults --only batch_runnable,quota      # a subset
    python -m sim2real.dev.faults --markdown                       # run, then print the README table
    python -m sim2real.dev.faults --from-json faults.json --markdown   # table of an earlier run

Exit code 0 only when every check of every scenario held. The scenarios: :mod:`sim2real.dev.fault_scenarios`; the
checks they share: :mod:`sim2real.dev.fault_checks`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.dev.fault_checks import LINEAGE, OUTCOME, STOP_WS, TRAIN, Outcome
from sim2real.dev.fault_scenarios import SCENARIO_NAMES, SCENARIOS, runs_of

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root

#: Every scenario's run conf starts from this: tiny training and evaluation, gate always passes.
BASE_CONF: dict[str, Any] = {
    "max_iterations": 2, "train_time_budget_seconds": 0, "eval_episodes": 3, "min_success_rate": 0.0,
    "seed": 7, "eval_seed": 3000,
}
#: Seconds between the sandbox's emulated status steps (Batch, CodeBuild, SageMaker, Greengrass) in the replay; the
#: sandbox's default (0.3 s) is paced for a person reading the demo's log.
STEP_SECONDS = 0.05

# -- running -----------------------------------------------------------------------------------------
class FailureListener:
    """Airflow listener (task SDK): records the error of every failed / up-for-retry try."""

    def __init__(self) -> None:
        self.errors: dict[tuple[str, str], list[str]] = {}
        self.lock = threading.Lock()
        #: task id -> callable(), run when that task starts (the current scenario's ``on_task_start``).
        self.on_start: dict[str, Callable[[], None]] = {}

    def install(self) -> None:
        from airflow.sdk._shared.listeners import hookimpl
        from airflow.sdk.listener import get_listener_manager

        listener = self

        class _Hooks:
            @hookimpl
            def on_task_instance_running(self, previous_state, task_instance):  # noqa: ARG002
                action = listener.on_start.pop(task_instance.task_id, None)
                if action is not None:
                    action()

            @hookimpl
            def on_task_instance_failed(self, previous_state, task_instance, error):  # noqa: ARG002
                with listener.lock:
                    listener.errors.setdefault((task_instance.run_id, task_instance.task_id), []).append(
                        f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error))

        get_listener_manager().add_listener(_Hooks())


def _snapshot(sandbox) -> dict[str, set]:
    from moto.sagemaker.models import sagemaker_backends

    return {
        "jobs": set(sandbox.batch.jobs),
        "commands": {c.command_id for c in sandbox.ssm._backend()._commands},
        "executions": set(sagemaker_backends[sandbox.account_id][sandbox.region].pipeline_executions),
        "deployments": set(sandbox.greengrass.deployments),
        "instances": _instances(sandbox),
    }


def _instances(sandbox) -> dict[str, str]:
    ec2 = sandbox.client("ec2", internal=True)
    return {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}


def _settle(sandbox, before: dict[str, set], timeout: float = 20.0) -> None:
    """Give terminate / cancel / stop calls a moment to land in the emulation."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [j for i, j in sandbox.batch.jobs.items() if i not in before["jobs"] and not j.job_stopped]
        if not live:
            return
        time.sleep(0.5)


def _collect(sandbox, env_config, dag_run, before, listener, t0: float, faults: dict) -> Outcome:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from moto.sagemaker.models import sagemaker_backends
    from sqlalchemy import select

    from sim2real.contract.run_key import make_run_key

    tasks: dict[str, dict[str, Any]] = {}
    with create_session() as session:
        for ti in session.scalars(select(TaskInstance).where(
                TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)).all():
            tasks[ti.task_id] = {"state": str(getattr(ti.state, "value", ti.state)), "try_number": ti.try_number,
                                 "duration": ti.duration}
        rows = session.execute(select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
            XComModel.task_id.in_([TRAIN, ids.BUILD_IMAGE]), XComModel.key == "return_value")).all()
        for task_id, value in rows:
            try:
                tasks[task_id]["xcom"] = json.loads(value) if isinstance(value, (str, bytes)) else value
            except (TypeError, ValueError):
                tasks[task_id]["xcom"] = value
    requests = Counter(r.action for r in sandbox.requests.since(t0))
    jobs = [{"job_id": i, "status": j.status, "reason": j.job_stopped_reason}
            for i, j in sandbox.batch.jobs.items() if i not in before["jobs"]]
    commands = [{"command_id": c.command_id, "status": c.status}
                for c in sandbox.ssm._backend()._commands if c.command_id not in before["commands"]]
    executions = [{"arn": a, "status": e.pipeline_execution_status}
                  for a, e in sagemaker_backends[sandbox.account_id][sandbox.region].pipeline_executions.items()
                  if a not in before["executions"]]
    deployments = []
    for dep_id, dep in sandbox.greengrass.deployments.items():
        if dep_id in before["deployments"]:
            continue
        devices = {thing: d["effective"][dep_id]["coreDeviceExecutionStatus"]
                   for thing, d in sandbox.greengrass.devices.items() if dep_id in d["effective"]}
        deployments.append({"deployment_id": dep_id, "status": dep.get("deploymentStatus"), "devices": devices})
    instances = _instances(sandbox)
    s3 = sandbox.client("s3", internal=True)
    run_key = make_run_key(dag_run.dag_id, dag_run.run_id)
    try:
        lineage = json.loads(s3.get_object(Bucket=env_config["artifacts_bucket"],
                                           Key=f"runs/{run_key}/lineage.json")["Body"].read())
    except Exception:  # noqa: BLE001
        lineage = None
    with listener.lock:
        errors = {task: list(msgs) for (run_id, task), msgs in listener.errors.items() if run_id == dag_run.run_id}
    return Outcome(state=str(getattr(dag_run.state, "value", dag_run.state)), tasks=tasks, errors=errors,
                   requests=requests, injected=Counter(e.data.get("action") for e in sandbox.events.find("sandbox", "fault")
                                                       if e.time >= t0 and e.data.get("action")),
                   jobs=jobs, commands=commands, executions=executions, deployments=deployments,
                   instances=instances, instances_before=before["instances"], lineage=lineage,
                   faults_left=json.loads(json.dumps(faults, default=str)),
                   elapsed_s=0.0)  # filled in by the caller


def run_scenarios(names: list[str] | None = None, home: Path | None = None, echo: Callable[[str], None] = print
                  ) -> list[dict[str, Any]]:
    os.environ.setdefault("SIM2REAL_POLL_SECONDS", "1")
    os.environ.setdefault("SIM2REAL_RETRY_DELAY_SECONDS", "1")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    selected = [s for s in SCENARIOS if names is None or s.name in names]
    unknown = set(names or []) - {s.name for s in selected}
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}; known: {', '.join(SCENARIO_NAMES)}")
    own_home = home is None
    home = Path(home or tempfile.mkdtemp(prefix="sim2real-faults-"))
    from sim2real.dev.demo import dag_test, load_dag, prepare_airflow_home
    from sim2real.dev.sandbox import Approver, Sandbox

    results: list[dict[str, Any]] = []
    try:
        with Sandbox(repo_root=REPO_ROOT, step_seconds=STEP_SECONDS) as sandbox:
            env_config = sandbox.provision()
            default_limits = dict(sandbox.quotas.limits)
            prepare_airflow_home(home, sandbox.airflow_env())
            dag = load_dag()
            # dag.test() keeps a run's conf in the DAG's params: every run gets every param explicitly
            defaults = dag.params.dump()
            listener = FailureListener()
            listener.install()
            by_name = {s.name: s for s in selected}
            for group in [[by_name[n] for n in run] for run in runs_of([s.name for s in selected])]:
                lead = group[0]
                sandbox.faults.clear()
                for scenario in group:
                    sandbox.faults.update(json.loads(json.dumps(scenario.faults)))
                sandbox.quotas.limits.clear()
                sandbox.quotas.limits.update(default_limits)
                for scenario in group:
                    sandbox.quotas.limits.update(scenario.quota_limits)
                # the workstation starts stopped, so the run starts it and must stop it again
                ec2 = sandbox.client("ec2", internal=True)
                ids = [i for i, st in _instances(sandbox).items() if st == "running"]
                if ids:
                    ec2.stop_instances(InstanceIds=ids)
                setup_states = [s.setup(sandbox, env_config) if s.setup else None for s in group]
                listener.on_start = {task_id: (lambda fn=fn: fn(sandbox, env_config))
                                     for s in group for task_id, fn in s.on_task_start.items()}
                before = _snapshot(sandbox)
                label = " + ".join(s.name for s in group)
                echo(f"[faults] {label}: {'; '.join(s.fault for s in group)}")
                approver = Approver(sandbox, model_package_group=env_config["sagemaker"]["model_package_group"],
                                    decision=lead.decision,
                                    description=f"{lead.decision.lower()} by the fault replay's reviewer")
                approver.start()
                env_var = "AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"
                saved_env = os.environ.get(env_var)
                if lead.env_patch:
                    os.environ[env_var] = json.dumps(_merge(env_config, lead.env_patch))
                conf = {**defaults, **BASE_CONF}
                for scenario in group:
                    conf.update(scenario.conf)
                t0, m0 = time.time(), time.monotonic()
                refusal = ""
                try:
                    dag_run = dag_test(dag, run_conf=conf)
                except Exception as err:  # ParamValidationError: Airflow refused the run (others re-raised)
                    if not lead.refused or type(err).__name__ != "ParamValidationError":
                        raise
                    dag_run, refusal = None, f"{type(err).__name__}: {err}"
                finally:
                    approver.cancel()
                    if saved_env is not None:
                        os.environ[env_var] = saved_env
                    else:  # the patched config must not reach the next scenario
                        os.environ.pop(env_var, None)
                if dag_run is None:
                    outcome = Outcome(state="refused", tasks={}, errors={"dag.test": [refusal]}, requests=Counter(),
                                      injected=Counter(), jobs=[], commands=[], executions=[], deployments=[],
                                      instances={}, instances_before={}, lineage=None, faults_left={},
                                      elapsed_s=time.monotonic() - m0)
                    checks = lead.check(outcome)
                    passed = all(ok for _, ok, _ in checks)
                    results.append({
                        "name": lead.name, "fault": lead.fault, "failure_mode": lead.failure_mode,
                        "expected": lead.expected, "passed": passed, "state": "refused", "failed_tasks": [],
                        "messages": {"dag.test": refusal[:500]}, "tries": {}, "submit_job_calls": 0, "jobs": [],
                        "commands": [], "executions": [], "deployments": [], "teardowns": {},
                        "checks": [{"check": n, "ok": ok, "detail": d} for n, ok, d in checks],
                        "elapsed_s": round(outcome.elapsed_s, 1)})
                    echo(f"[faults] {lead.name}: {'PASS' if passed else 'FAIL'} (run refused at creation)")
                    for n, ok, d in checks:
                        if not ok:
                            echo(f"[faults]   FAILED check {n}: {d}")
                    continue
                _settle(sandbox, before)
                outcome = _collect(sandbox, env_config, dag_run, before, listener, t0, sandbox.faults)
                outcome.elapsed_s = time.monotonic() - m0
                # the stage that failed first, run_outcome (which only repeats it) last
                failed = sorted((t for t, v in outcome.tasks.items() if v["state"] == "failed"),
                                key=lambda t: (t == OUTCOME, t))
                for scenario, setup_state in zip(group, setup_states, strict=True):
                    outcome.probe = scenario.probe(sandbox, env_config, setup_state) if scenario.probe else {}
                    checks = scenario.check(outcome)
                    passed = all(ok for _, ok, _ in checks)
                    results.append({
                        "name": scenario.name, "fault": scenario.fault, "failure_mode": scenario.failure_mode,
                        "expected": scenario.expected, "passed": passed, "state": outcome.state,
                        "failed_tasks": failed,
                        "messages": {t: outcome.errors.get(t, [])[-1][:500] for t in failed if outcome.errors.get(t)},
                        "tries": {t: v["try_number"] for t, v in outcome.tasks.items() if v["try_number"] > 1},
                        "submit_job_calls": outcome.requests.get("SubmitJob", 0),
                        "jobs": outcome.jobs, "commands": outcome.commands, "executions": outcome.executions,
                        "deployments": outcome.deployments,
                        "teardowns": {t: outcome.state_of(t) for t in (STOP_WS, LINEAGE, OUTCOME)},
                        "checks": [{"check": n, "ok": ok, "detail": d} for n, ok, d in checks],
                        "elapsed_s": round(outcome.elapsed_s, 1),
                        "shared_run": [s.name for s in group if s is not scenario],
                    })
                    echo(f"[faults] {scenario.name}: {'PASS' if passed else 'FAIL'} in {outcome.elapsed_s:.0f} s "
                         f"(run {outcome.state}; failed: {', '.join(failed) or '-'}"
                         f"{'; run shared with ' + label if len(group) > 1 else ''})")
                    for n, ok, d in checks:
                        if not ok:
                            echo(f"[faults]   FAILED check {n}: {d}")
    finally:
        if own_home:
            shutil.rmtree(home, ignore_errors=True)
    return results


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in, nested objects key by key."""
    out = json.loads(json.dumps(base))
    for key, value in patch.items():
        out[key] = _merge(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


# -- reporting -----------------------------------------------------------------------------------------
def _short(message: str) -> str:
    first = message.split("\n", 1)[0]
    first = first.split(": ", 1)[1] if first.startswith(("AirflowException", "AirflowFailException", "ClientError",
                                                          "AirflowSensorTimeout")) else first
    return (first[:230] + "…") if len(first) > 230 else first


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["| fault injected | failure mode | run | failed task: message | what was left running | teardowns | result |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        failed = "; ".join(f"`{t}`: {_short(r['messages'].get(t, ''))}"
                           for t in sorted(r["failed_tasks"], key=lambda t: (t == OUTCOME, t))) or "—"
        failed = failed.replace("|", "\\|")
        left = []
        if r["jobs"]:
            left.append(f"{len(r['jobs'])} Batch job ({', '.join(sorted({j['status'] for j in r['jobs']}))})")
        else:
            left.append("no Batch job")
        if r["commands"]:
            left.append("SSM " + ", ".join(sorted({c['status'] for c in r['commands']})))
        if r["executions"]:
            left.append("pipeline " + ", ".join(sorted({e['status'] for e in r['executions']})))
        if r["deployments"]:
            left.append("deployment " + ", ".join(sorted({str(d['status']) for d in r['deployments']})))
        retries = ", ".join(f"{t} ×{n}" for t, n in r["tries"].items())
        run = r["state"] + (f" (tries: {retries})" if retries else "")
        teardowns = ", ".join(f"{t.split('.')[-1]} {s or '—'}" for t, s in r["teardowns"].items())
        result = f"{'PASS' if r['passed'] else 'FAIL'} ({r['elapsed_s']:.0f} s)"
        lines.append(f"| {r['fault']} | {r['failure_mode']} | {run} | {failed} | {'; '.join(left)} | {teardowns} | {result} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim2real-faults", description=__doc__.split("\n")[0])
    ap.add_argument("--json-out", default=None, help="write the results here as JSON")
    ap.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(SCENARIO_NAMES)}")
    ap.add_argument("--home", default=None, help="Airflow home (default: a temporary folder, removed after)")
    ap.add_argument("--markdown", action="store_true", help="print the results as a Markdown table")
    ap.add_argument("--from-json", default=None, help="do not run: read results written by --json-out")
    args = ap.parse_args(argv)
    started = time.monotonic()
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        results = data["scenarios"] if isinstance(data, dict) else data
    else:
        names = [n.strip() for n in args.only.split(",")] if args.only else None
        results = run_scenarios(names, Path(args.home) if args.home else None)
        elapsed = time.monotonic() - started
        print(f"[faults] {sum(r['passed'] for r in results)}/{len(results)} scenarios passed in {elapsed:.0f} s")
        if args.json_out:
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(json.dumps({"elapsed_s": round(elapsed, 1), "scenarios": results},
                                                      indent=2, default=str))
    if args.markdown:
        print(markdown(results))
    return 0 if results and all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
