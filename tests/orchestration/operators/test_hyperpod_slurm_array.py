"""A HyperPod sweep's Slurm job array: HyperPodSlurmJobOperator submitting it (``submit_only``) and waiting for one
array task (``attach_job_id`` + ``array_index``), against the sandbox's head node (SSM Run Command running the
emulated Slurm client, whose ``--array`` / ``%`` throttle / ``sacct -j <id>_<i>`` follow Slurm's documentation).

The batch step runs a tiny launcher (prints its array task, sleeps, exits with the task's code) instead of the
trainer.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk.exceptions import TaskDeferred
from sim2real.contract import task_ids as ids
from sim2real.orchestration import slurm
from sim2real.orchestration.operators.hyperpod_slurm import HyperPodSlurmJobOperator

from operator_helpers import first_event, hyperpod_sandbox_fixture

# integration (not in make test-unit): the sandbox's HyperPod head node (operator_helpers.hyperpod_sandbox)
pytestmark = pytest.mark.integration

sandbox = hyperpod_sandbox_fixture('echo "array task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID marker=$MARKER"')


@pytest.fixture
def ti_task_id():  # the operators' conftest builds ``context`` from it
    return ids.HYPERPOD_SUBMIT_SWEEP


def _common(sb) -> dict:
    hp = sb.config["hyperpod"]
    return dict(cluster_name="sim2real-hyperpod", submit_host_tag_key=hp["submit_host_tag_key"],
                submit_host_tag_value=hp["submit_host_tag_value"], poll_interval=1, agent_online_timeout_seconds=10)


def submitter(sb, name: str, tasks: list[dict], parallel: int, hold: Path | None = None) -> HyperPodSlurmJobOperator:
    """``hyperpod.submit_sweep`` for a job array of ``len(tasks)`` tasks (task ``i`` exports ``tasks[i]``)."""
    hp = sb.config["hyperpod"]
    log_path = f"{hp['shared_dir']}/logs/{name}-%A_%a.out"
    shared = {"HOLD_FILE": str(hold)} if hold else {}
    script = slurm.render_script(job_name=name, num_nodes=1, log_path=log_path, launcher=sb.test_launcher,
                                 environment=shared, use_container_image=False, time_limit_minutes=30,
                                 task_environments=tasks)
    commands = slurm.array_submit_commands(script_path=f"{hp['shared_dir']}/jobs/{name}.sbatch", script_text=script,
                                           job_name=name, log_dir=f"{hp['shared_dir']}/logs",
                                           array=slurm.array_spec(len(tasks), parallel), tasks=len(tasks))
    return HyperPodSlurmJobOperator(task_id="submit_sweep", job_name=name, submit_commands=commands, log_path=log_path,
                                    submit_only=True, **_common(sb))


def waiter(sb, name: str, array_id: str, index: int) -> HyperPodSlurmJobOperator:
    """``sweep.train_on_slurm`` of candidate ``index``."""
    log_path = f"{sb.config['hyperpod']['shared_dir']}/logs/{name}-%A_%a.out"
    return HyperPodSlurmJobOperator(task_id="train_on_slurm", job_name=name, submit_commands=[], log_path=log_path,
                                    attach_job_id=array_id, array_index=index, num_nodes=1, usd_per_node_hour=7.09,
                                    **_common(sb))


def records(sb, array_id: str) -> list[dict]:
    return [j for j in sb.slurm.jobs() if j.get("array_job_id") == array_id]


def wait_until(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert predicate()


def test_each_candidate_waits_for_its_own_array_task_and_a_retry_never_submits_twice(sandbox, context):
    hold = Path(tempfile.mkdtemp(prefix="slurm-hold-")) / "release"
    tasks = [{"MARKER": f"c{i}", "SLEEP_SECONDS": "1"} for i in range(3)]
    first = submitter(sandbox, "t-array", tasks, parallel=2, hold=hold).execute(context)
    assert first["reattached"] is False and first["job_id"].isdigit()
    array_id = first["job_id"]
    # A retried submission finds the array by name while its tasks are active: no second array.
    again = submitter(sandbox, "t-array", tasks, parallel=2, hold=hold).execute(context)
    assert again["job_id"] == array_id and again["reattached"] is True
    assert [j["job_id"] for j in records(sandbox, array_id)] == [f"{array_id}_{i}" for i in range(3)]
    assert {j["name"] for j in sandbox.slurm.jobs() if j["name"] == "t-array"} == {"t-array"}
    assert len([j for j in sandbox.slurm.jobs() if j["name"] == "t-array"]) == 3
    ops = [waiter(sandbox, "t-array", array_id, i) for i in range(3)]
    triggers = []
    try:
        for op in ops:  # each defers on its own task's state (the tasks are held: none has ended yet)
            with pytest.raises(TaskDeferred) as info:
                op.execute(context)
            triggers.append(info.value.trigger)
    finally:
        hold.touch()
    assert [t.job_id for t in triggers] == [f"{array_id}_{i}" for i in range(3)]
    for i, (op, trigger) in enumerate(zip(ops, triggers, strict=True)):
        event = first_event(trigger)
        assert event["status"] == "success" and event["state"] == "COMPLETED", event
        result = op.execute_complete(context, event=event)
        assert result["job_id"] == f"{array_id}_{i}" and result["reattached"] is True
        assert result["log_path"].endswith(f"t-array-{array_id}_{i}.out")
        assert f"array task {i} of {array_id} marker=c{i}" in open(result["log_path"]).read()  # its own variables
        assert result["cost_usd"] is not None and result["num_nodes"] == 1
    # Slurm ran at most two tasks at once (%2), the third after one of the first two ended.
    spans = [(j["start_time"], j["end_time"]) for j in records(sandbox, array_id)]
    assert spans[2][0] >= min(spans[0][1], spans[1][1])
    # A retry of a candidate after its task COMPLETED reports it without deferring (and without submitting).
    retried = waiter(sandbox, "t-array", array_id, 1).execute(context)
    assert retried["job_id"] == f"{array_id}_1" and retried["state"] == "COMPLETED"
    # The whole array COMPLETED: a retried submission reattaches to it instead of training every candidate again.
    done = submitter(sandbox, "t-array", tasks, parallel=2).execute(context)
    assert done["job_id"] == array_id and done["reattached"] is True
    assert len([j for j in sandbox.slurm.jobs() if j["name"] == "t-array"]) == 3


def test_a_failed_array_task_names_the_cluster_job_task_state_and_exit_code(sandbox, context):
    tasks = [{"MARKER": "c0"}, {"MARKER": "c1", "EXIT_CODE": "3", "SLEEP_SECONDS": "2"}]
    array_id = submitter(sandbox, "t-array-fail", tasks, parallel=2).execute(context)["job_id"]
    op = waiter(sandbox, "t-array-fail", array_id, 1)
    with pytest.raises(AirflowFailException) as err:  # settled at once, or after the deferred wait
        try:
            op.execute(context)
        except TaskDeferred as deferred:
            op.execute_complete(context, event=first_event(deferred.trigger))
    message = str(err.value)
    for needle in ("sim2real-hyperpod", f"Slurm job {array_id}_1", f"array task 1 of job array {array_id}", "FAILED",
                   "exit code 3:0", f"t-array-fail-{array_id}_1.out", "marker=c1"):
        assert needle in message, (needle, message)
    assert context["ti"].xcom["slurm_job_end"] == {"job_id": f"{array_id}_1", "state": "FAILED", "exit_code": "3:0"}
    # A retried (or cleared) submission resubmits only the failed candidate, as a new array of that index alone;
    # the candidate whose task COMPLETED keeps it (its training is not paid for twice).
    wait_until(lambda: all(j["state"] not in ("PENDING", "RUNNING") for j in records(sandbox, array_id)))
    again = submitter(sandbox, "t-array-fail", [{"MARKER": "c0"}, {"MARKER": "c1"}], parallel=2).execute(context)
    second = again["job_id"]
    assert second != array_id and again["reattached"] is False
    assert again["tasks"] == {"0": f"{array_id}_0", "1": f"{second}_1"}
    assert [j["job_id"] for j in records(sandbox, second)] == [f"{second}_1"]  # sbatch --array=1%2: task 1 only
    op = waiter(sandbox, "t-array-fail", second, 1)
    op.array_task_ids, op.attach_job_id = again["tasks"], array_id  # as train_on_slurm gets them from submit_sweep
    try:
        result = op.execute(context)
    except TaskDeferred as deferred:
        result = op.execute_complete(context, event=first_event(deferred.trigger))
    assert result["job_id"] == f"{second}_1" and result["state"] == "COMPLETED"
    assert "marker=c1" in open(result["log_path"]).read()  # the same script: candidate c1's own variables
    kept = waiter(sandbox, "t-array-fail", second, 0)
    kept.array_task_ids = again["tasks"]
    assert kept.execute(context)["job_id"] == f"{array_id}_0"  # still the first array's COMPLETED task
    # Every candidate has a COMPLETED task now: nothing is submitted.
    done = submitter(sandbox, "t-array-fail", [{"MARKER": "c0"}, {"MARKER": "c1"}], parallel=2).execute(context)
    assert done["reattached"] is True and done["job_id"] == second and done["tasks"] == again["tasks"]
    assert len([j for j in sandbox.slurm.jobs() if j["name"] == "t-array-fail"]) == 3


class SweepTI:
    """The candidate's task instance: its XComs, and ``get_task_states`` answering the candidates' states
    (``{run_id: {"<task_id>_<map_index>": state}}``, as the Task Execution API does)."""

    dag_id, run_id = "sim_to_real", "manual__sweep"

    def __init__(self, map_index: int, states: dict[str, str]):
        self.map_index, self.states, self.xcom = map_index, states, {}
        self.queries: list[dict] = []

    def xcom_push(self, key, value):
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value", map_indexes=None):
        return self.xcom.get(key)

    def get_task_states(self, **kwargs):
        self.queries.append(kwargs)
        return {self.run_id: dict(self.states)}


@pytest.mark.parametrize("max_failed, others", [(0, "CANCELLED"), (1, "RUNNING")])
def test_a_failed_candidate_cancels_the_array_once_the_sweep_cannot_reach_its_minimum(sandbox, max_failed, others):
    name = f"t-array-lost-{max_failed}"
    tasks = [{"MARKER": "c0", "EXIT_CODE": "4"}] + [{"MARKER": f"c{i}", "SLEEP_SECONDS": "60"} for i in (1, 2)]
    submitted = submitter(sandbox, name, tasks, parallel=3).execute({"ti": SweepTI(0, {})})
    array_id = submitted["job_id"]
    wait_until(lambda: records(sandbox, array_id)[0]["state"] == "FAILED")
    wait_until(lambda: all(j["state"] == "RUNNING" for j in records(sandbox, array_id)[1:]))
    op = waiter(sandbox, name, array_id, 0)
    op.array_task_ids, op.sweep_max_failed = submitted["tasks"], max_failed
    op.sweep_task_ids = ["sweep.train_on_slurm", "sweep.wait_for_checkpoint"]
    ti = SweepTI(0, {"sweep.train_on_slurm_0": "running", "sweep.train_on_slurm_1": "deferred",
                     "sweep.train_on_slurm_2": "deferred"})
    with pytest.raises(AirflowFailException, match="FAILED, exit code 4:0"):
        op.execute({"ti": ti})
    assert ti.queries[0]["task_ids"] == ["sweep.train_on_slurm", "sweep.wait_for_checkpoint"]
    assert [j["state"] for j in records(sandbox, array_id)] == ["FAILED", others, others]
    if others == "RUNNING":  # a second failed candidate is one more than the sweep may lose
        ti.states["sweep.wait_for_checkpoint_2"] = "failed"
        with pytest.raises(AirflowFailException):
            op.execute({"ti": ti})
        assert [j["state"] for j in records(sandbox, array_id)] == ["FAILED", "CANCELLED", "CANCELLED"]


def test_killing_a_candidate_scancels_its_array_task_only(sandbox, context):
    tasks = [{"MARKER": f"c{i}", "SLEEP_SECONDS": "60"} for i in range(2)]
    array_id = submitter(sandbox, "t-array-kill", tasks, parallel=2).execute(context)["job_id"]
    wait_until(lambda: all(j["state"] == "RUNNING" for j in records(sandbox, array_id)))
    op = waiter(sandbox, "t-array-kill", array_id, 0)
    with pytest.raises(TaskDeferred):
        op.execute(context)
    op.on_kill()
    states = {j["job_id"]: j["state"] for j in records(sandbox, array_id)}
    assert states == {f"{array_id}_0": "CANCELLED", f"{array_id}_1": "RUNNING"}
    waiter(sandbox, "t-array-kill", array_id, 1).on_kill()  # never attached: nothing to cancel
    assert records(sandbox, array_id)[1]["state"] == "RUNNING"
    from sim2real.orchestration.hooks.workstation import WorkstationHook
    from sim2real.orchestration.waits.ssm import run_short_command

    head = WorkstationHook().find_instance_by_tag(sandbox.config["hyperpod"]["submit_host_tag_key"],
                                                  sandbox.config["hyperpod"]["submit_host_tag_value"])["InstanceId"]
    run_short_command(WorkstationHook().conn, head, slurm.cancel_commands(f"{array_id}_1"),
                      execution_timeout_seconds=60)
    wait_until(lambda: all(j["state"] == "CANCELLED" for j in records(sandbox, array_id)))


def test_attach_arguments_are_checked():
    with pytest.raises(ValueError, match="exclude each other"):
        HyperPodSlurmJobOperator(task_id="x", cluster_name="c", submit_host_tag_key="k", submit_host_tag_value="v",
                                 job_name="j", submit_commands=[], submit_only=True, attach_job_id="12")
    op = HyperPodSlurmJobOperator(task_id="x", cluster_name="c", submit_host_tag_key="k", submit_host_tag_value="v",
                                  job_name="j", submit_commands=[], attach_job_id="None", array_index=0)
    with pytest.raises(ValueError, match="attach_job_id is empty"):
        op._attached_job_id()
    op.attach_job_id, op.array_index = "12", "3"
    assert op._attached_job_id() == "12_3"
    op.array_index = None
    assert op._attached_job_id() == "12"
