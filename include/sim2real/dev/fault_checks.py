"""The fault replay's checks: what one run did (:class:`Outcome`) and the checks every scenario shares.

A check (:data:`Check`) reads an :class:`Outcome` (Airflow's task states and errors, the sandbox's requests and
what the run started) and returns ``(name, ok, detail)`` rows: :func:`succeeds`, :func:`nothing_running`,
:func:`teardowns_ran`, :func:`faults_consumed`, :func:`nothing_started` and the builders :func:`fails_with`,
:func:`submits`, :func:`not_run`, :func:`all_of`, :func:`custom`. The scenarios that use them:
:mod:`sim2real.dev.fault_scenarios`; the replay: :mod:`sim2real.dev.faults`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import task_ids as ids

LINEAGE = ids.WRITE_LINEAGE
STOP_WS = ids.STOP_WORKSTATION
TRAIN = ids.BATCH_TRAIN_POLICY
OUTCOME = ids.RUN_OUTCOME

Check = Callable[["Outcome"], list[tuple[str, bool, str]]]


@dataclass
class Outcome:
    """What one run did, read from Airflow's DB, the failure listener and the sandbox."""

    state: str
    tasks: dict[str, dict[str, Any]]            # task_id -> {state, try_number, duration}
    errors: dict[str, list[str]]                # task_id -> error message of each failed try
    requests: Counter                           # AWS action -> calls during the run
    injected: Counter                           # AWS action -> calls answered with an injected error
    jobs: list[dict[str, Any]]                  # Batch jobs created during the run
    commands: list[dict[str, Any]]              # SSM commands sent during the run
    executions: list[dict[str, Any]]            # pipeline executions started during the run
    deployments: list[dict[str, Any]]           # Greengrass deployments created during the run
    instances: dict[str, str]                   # EC2 instance id -> state after the run
    instances_before: dict[str, str]            # ... and before it
    lineage: dict[str, Any] | None
    faults_left: dict[str, Any]
    elapsed_s: float
    probe: dict[str, Any] = field(default_factory=dict)  # Scenario.probe's answer

    def state_of(self, task_id: str) -> str | None:
        return (self.tasks.get(task_id) or {}).get("state")

    def tries(self, task_id: str) -> int:
        return int((self.tasks.get(task_id) or {}).get("try_number") or 0)

    def error(self, task_id: str) -> str:
        return "\n".join(self.errors.get(task_id, []))


# -- checks shared by every scenario ----------------------------------------------------------------
def _c(name: str, ok: bool, detail: Any = "") -> tuple[str, bool, str]:
    return name, bool(ok), str(detail)[:600]


def fails_with(task_id: str, *needles: str) -> Check:
    def check(o: Outcome) -> list[tuple[str, bool, str]]:
        message = o.error(task_id)
        return [
            _c("run failed", o.state == "failed", o.state),
            _c(f"{task_id} failed", o.state_of(task_id) == "failed", o.state_of(task_id)),
            *[_c(f"message has {n!r}", n.lower() in message.lower(), message[:400]) for n in needles],
        ]

    return check


def succeeds(o: Outcome) -> list[tuple[str, bool, str]]:
    bad = {t: v["state"] for t, v in o.tasks.items() if v["state"] not in ("success", "skipped")}
    return [_c("run succeeded", o.state == "success", o.state), _c("every task succeeded or was skipped", not bad, bad)]


def nothing_running(o: Outcome) -> list[tuple[str, bool, str]]:
    out = []
    live = [j for j in o.jobs if j["status"] not in ("SUCCEEDED", "FAILED")]
    out.append(_c("no Batch job left running", not live, live or [f"{j['job_id'][:8]} {j['status']}" for j in o.jobs]))
    live = [c for c in o.commands if c["status"] in ("Pending", "InProgress", "Delayed", "Cancelling")]
    out.append(_c("no SSM command left running", not live, live or [c["status"] for c in o.commands]))
    live = [e for e in o.executions if e["status"] in ("Executing", "Stopping")]
    out.append(_c("no pipeline execution left running", not live, live or [e["status"] for e in o.executions]))
    live = [d for d in o.deployments if d["status"] == "ACTIVE"
            and any(s in ("QUEUED", "IN_PROGRESS") for s in d["devices"].values())]
    out.append(_c("no Greengrass deployment left in progress", not live, live or o.deployments))
    started = {i: s for i, s in o.instances.items()
               if s not in ("stopped", "stopping", "terminated") and o.instances_before.get(i) != s}
    out.append(_c("no instance left running that the run started", not started,
                  {i: f"{o.instances_before.get(i)} -> {s}" for i, s in o.instances.items()}))
    return out


def teardowns_ran(o: Outcome) -> list[tuple[str, bool, str]]:
    out = [_c("write_lineage ran (teardown)", o.state_of(LINEAGE) == "success", o.state_of(LINEAGE)),
           _c("lineage.json written", o.lineage is not None, ""),
           _c("run_outcome ran (last teardown) and agrees with the run's state",
              o.state_of(OUTCOME) == o.state and o.state in ("success", "failed"),
              f"run_outcome {o.state_of(OUTCOME)}, run {o.state}")]
    if o.state_of(ids.RUN_EVALUATION) in ("success", "failed", "up_for_retry"):
        out.append(_c("stop_workstation ran (teardown)", o.state_of(STOP_WS) == "success", o.state_of(STOP_WS)))
    return out


def submits(n: int) -> Check:
    def check(o: Outcome) -> list[tuple[str, bool, str]]:
        accepted = o.requests.get("SubmitJob", 0) - o.injected.get("SubmitJob", 0)
        return [_c(f"SubmitJob accepted {n} time(s)", accepted == n,
                   f"{accepted} accepted, {o.injected.get('SubmitJob', 0)} answered with an injected error"),
                _c(f"{n} Batch job(s) exist", len(o.jobs) == n, [j["job_id"] for j in o.jobs])]

    return check


def not_run(*task_ids: str) -> Check:
    def check(o: Outcome) -> list[tuple[str, bool, str]]:
        return [_c(f"{t} did not run", o.state_of(t) in (None, "upstream_failed", "skipped", "removed"), o.state_of(t))
                for t in task_ids]

    return check


def faults_consumed(o: Outcome) -> list[tuple[str, bool, str]]:
    left = {k: {a: n for a, n in v.items() if n} for k, v in o.faults_left.items() if isinstance(v, dict)}
    left = {k: v for k, v in left.items() if v}
    return [_c("every injected error was served", not left, left)]


def all_of(*checks: Check) -> Check:
    def check(o: Outcome) -> list[tuple[str, bool, str]]:
        return [c for chk in checks for c in chk(o)]

    return check


def custom(name: str, fn: Callable[[Outcome], tuple[bool, Any]]) -> Check:
    def check(o: Outcome) -> list[tuple[str, bool, str]]:
        ok, detail = fn(o)
        return [_c(name, ok, detail)]

    return check


def nothing_started(o: Outcome) -> list[tuple[str, bool, str]]:
    """No build, no training job, no command, no pipeline execution, no deployment."""
    spend = {a: o.requests.get(a, 0) for a in ("StartBuild", "SubmitJob", "RegisterJobDefinition", "SendCommand",
                                               "StartPipelineExecution", "CreateDeployment", "UpdateCluster")}
    return [_c("nothing was started (no StartBuild, SubmitJob, SendCommand, ...)", not any(spend.values()), spend)]
