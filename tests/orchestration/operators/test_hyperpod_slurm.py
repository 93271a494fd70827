"""HyperPodSlurmJobOperator / HyperPodSlurmJobTrigger against the sandbox's HyperPod head node (SSM Run
Command running the emulated Slurm client), plus the Slurm text helpers of ``sim2real.orchestration.slurm``.

The batch step runs a tiny launcher (prints its node, sleeps, exits with a chosen code) instead of the trainer.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk.exceptions import TaskDeferred
from sim2real.contract import task_ids as ids
from sim2real.orchestration import slurm
from sim2real.orchestration.operators.hyperpod_slurm import HyperPodSlurmJobOperator
from sim2real.orchestration.triggers.hyperpod import HyperPodSlurmJobTrigger

from operator_helpers import first_event, hyperpod_sandbox_fixture

# integration (not in make test-unit): the sandbox's HyperPod head node (operator_helpers.hyperpod_sandbox)
pytestmark = pytest.mark.integration

sandbox = hyperpod_sandbox_fixture(
    'echo "task node=$SLURM_NODEID of $SLURM_NNODES master=$MASTER_ADDR rank=$NODE_RANK marker=$MARKER"')


@pytest.fixture
def ti_task_id():  # the operators' conftest builds ``context`` from it
    return ids.HYPERPOD_TRAIN_POLICY


def make_operator(sb, name: str, nodes: int = 2, **env: str) -> HyperPodSlurmJobOperator:
    """An operator submitting job ``name``, whose tasks wait for the operator's hold file before they run on
    (``defer`` creates it once the operator deferred), so the job is still running whenever the operator first
    looks at it, however loaded the machine is."""
    hp = sb.config["hyperpod"]
    hold_file = Path(tempfile.mkdtemp(prefix="slurm-hold-")) / "release"
    env = {"HOLD_FILE": str(hold_file), **env}
    log_path = f"{hp['shared_dir']}/logs/{name}-%j.out"
    script = slurm.render_script(job_name=name, num_nodes=nodes, log_path=log_path, launcher=sb.test_launcher,
                                 environment={"MARKER": "it's a test", **env}, use_container_image=False,
                                 time_limit_minutes=30)
    commands = slurm.submit_commands(script_path=f"{hp['shared_dir']}/jobs/{name}.sbatch", script_text=script,
                                     job_name=name, log_dir=f"{hp['shared_dir']}/logs")
    op = HyperPodSlurmJobOperator(
        task_id="train_policy", cluster_name="sim2real-hyperpod", submit_host_tag_key=hp["submit_host_tag_key"],
        submit_host_tag_value=hp["submit_host_tag_value"], job_name=name, submit_commands=commands,
        log_path=log_path, poll_interval=1, agent_online_timeout_seconds=10,
    )
    HOLD_FILES[id(op)] = hold_file
    return op


#: operator id -> the file its job's tasks wait for
HOLD_FILES: dict[int, Path] = {}


def defer(op, context, *, release: bool = True) -> tuple[HyperPodSlurmJobTrigger, dict]:
    """Run ``op.execute`` expecting it to defer; then let its job run on (also when it did not defer), unless
    ``release`` is false: then the job's tasks wait for ``HOLD_FILES[id(op)]`` until the test creates it."""
    deferred = False
    try:
        with pytest.raises(TaskDeferred) as info:
            op.execute(context)
        deferred = True
    finally:
        if release or not deferred:
            HOLD_FILES[id(op)].touch()
    return info.value.trigger, info.value.kwargs or {}


def job(sb, job_id: str) -> dict:
    return next(j for j in sb.slurm.jobs() if j["job_id"] == job_id)


def wait_for(sb, job_id: str, state: str, seconds: float = 20) -> dict:
    """The job once it is in ``state``, or as it is after ``seconds``."""
    deadline = time.monotonic() + seconds
    while job(sb, job_id)["state"] != state and time.monotonic() < deadline:
        time.sleep(0.2)
    return job(sb, job_id)


def test_two_node_job_completes(sandbox, context):
    op = make_operator(sandbox, "t-success")
    trigger, _ = defer(op, context)
    assert context["ti"].xcom["slurm_job_id"] == trigger.job_id
    event = first_event(trigger)
    assert event["status"] == "success" and event["state"] == "COMPLETED" and event["exit_code"] == "0:0"
    result = op.execute_complete(context, event=event)
    assert result["job_id"] == trigger.job_id and result["state"] == "COMPLETED" and result["reattached"] is False
    log = open(result["log_path"]).read()
    # srun ran one task per node; node 0 = the first host of the nodelist = MASTER_ADDR.
    assert "task node=0 of 2 master=127.0.0.1 rank=0 marker=it's a test" in log
    assert "task node=1 of 2 master=127.0.0.1 rank=1" in log


def test_failed_job_names_cluster_job_state_exit_code_and_log(sandbox, context):
    op = make_operator(sandbox, "t-failed", EXIT_CODE="3")
    trigger, _ = defer(op, context)
    event = first_event(trigger)
    assert event["status"] == "failure" and event["state"] == "FAILED" and event["exit_code"] == "3:0"
    with pytest.raises(AirflowFailException) as err:
        op.execute_complete(context, event=event)
    message = str(err.value)
    for needle in ("sim2real-hyperpod", f"Slurm job {trigger.job_id}", "FAILED", "exit code 3:0",
                   f"t-failed-{trigger.job_id}.out", "task node=0 of 2"):
        assert needle in message, (needle, message)


def test_fault_fails_the_job(sandbox, context):
    sandbox.faults["slurm_job_fail"] = True
    try:
        op = make_operator(sandbox, "t-fault", nodes=1)
        # the faulted job exits at once: the operator either defers and the trigger reports it, or finds it
        # already over and settles without deferring — either way the task fails with the job's end
        with pytest.raises(AirflowFailException, match=r"ended FAILED, exit code 1:0"):
            trigger, _ = defer(op, context)
            op.execute_complete(context, event=first_event(trigger))
    finally:
        sandbox.faults.clear()


def test_on_kill_scancels_and_the_job_ends_cancelled(sandbox, context):
    op = make_operator(sandbox, "t-kill", SLEEP_SECONDS="60")
    trigger, _ = defer(op, context)
    running = wait_for(sandbox, trigger.job_id, "RUNNING")
    assert running["state"] == "RUNNING", open(running["output"]).read()
    op.on_kill()
    assert job(sandbox, trigger.job_id)["state"] == "CANCELLED"
    event = first_event(trigger)
    assert event["status"] == "failure" and event["state"] == "CANCELLED"
    with pytest.raises(AirflowFailException, match="CANCELLED"):
        op.execute_complete(context, event=event)


def test_trigger_on_kill_scancels(sandbox, context):
    op = make_operator(sandbox, "t-trigger-kill", SLEEP_SECONDS="60")
    trigger, _ = defer(op, context)
    wait_for(sandbox, trigger.job_id, "RUNNING")
    asyncio.run(trigger.on_kill())
    cancelled = wait_for(sandbox, trigger.job_id, "CANCELLED")
    assert cancelled["state"] == "CANCELLED", (cancelled, open(cancelled["output"]).read())


def tries(op, context, try_number: int, max_tries: int, retries: int = 2):
    """``op`` with ``retries`` and ``context`` whose task instance has Airflow's try counters (a new task instance:
    ``max_tries = retries``; ``clear_task_instances``: ``max_tries = try_number + retries``)."""
    op.retries = retries
    context["ti"].try_number, context["ti"].max_tries = try_number, max_tries
    return op, context


def test_retry_reattaches_to_the_running_job_instead_of_submitting_again(sandbox, context):
    # The job must still be running when the second try looks (a job already over is settled without deferring):
    # its tasks wait for the first try's hold file until then.
    first_op = make_operator(sandbox, "t-reattach")
    first, _ = defer(*tries(first_op, context, 1, 2), release=False)
    second_op = make_operator(sandbox, "t-reattach")
    try:
        second, _ = defer(*tries(second_op, context, 2, 2))  # a retry: max_tries unchanged
    finally:
        HOLD_FILES[id(first_op)].touch()  # also when the retry failed: the job would hold the nodes
    assert second.job_id == first.job_id and second.reattached is True
    assert [j["job_id"] for j in sandbox.slurm.jobs() if j["name"] == "t-reattach"] == [first.job_id]
    result = second_op.execute_complete(context, event=first_event(second))
    assert result["reattached"] is True and result["state"] == "COMPLETED"


def test_a_cleared_task_cancels_the_earlier_tries_job_and_submits_a_new_one(sandbox, context):
    """Before: the first try after a person's clear reattached to the cleared try's job still running (same job
    name), so the clear silently continued the old job."""
    first, _ = defer(*tries(make_operator(sandbox, "t-cleared", SLEEP_SECONDS="30"), context, 1, 2))
    second_op = make_operator(sandbox, "t-cleared")
    # clear_task_instances: max_tries = try_number (1) + retries (2); the new try is try 2
    second, _ = defer(*tries(second_op, context, 2, 3))
    assert second.job_id != first.job_id and second.reattached is False
    assert job(sandbox, first.job_id)["state"] == "CANCELLED"
    assert [j["job_id"] for j in sandbox.slurm.jobs() if j["name"] == "t-cleared"] == [first.job_id, second.job_id]
    result = second_op.execute_complete(context, event=first_event(second))  # runs once the old job freed the nodes
    assert result["job_id"] == second.job_id and result["reattached"] is False and result["state"] == "COMPLETED"


def test_retry_after_the_job_completed_reports_it_instead_of_submitting_again(sandbox, context):
    first_op = make_operator(sandbox, "t-done")
    first, _ = defer(first_op, context)
    assert first_event(first)["state"] == "COMPLETED"  # e.g. the task then failed while resuming
    second_op = make_operator(sandbox, "t-done")
    result = second_op.execute(context)  # the job is already over: settled in the task, no trigger to race
    assert result["job_id"] == first.job_id and result["reattached"] is True and result["state"] == "COMPLETED"
    assert [j["job_id"] for j in sandbox.slurm.jobs() if j["name"] == "t-done"] == [first.job_id]


def test_a_failed_job_is_not_reattached_a_retry_submits_again(sandbox, context):
    first, _ = defer(make_operator(sandbox, "t-refail", nodes=1, EXIT_CODE="2"), context)
    assert first_event(first)["state"] == "FAILED"
    second, _ = defer(make_operator(sandbox, "t-refail", nodes=1), context)
    assert second.job_id != first.job_id and second.reattached is False


def test_wait_timeout_cancels_the_job_and_fails_without_retry(sandbox, context):
    op = make_operator(sandbox, "t-timeout", nodes=1, SLEEP_SECONDS="60")
    op.max_attempts = 2
    trigger, _ = defer(op, context)
    event = first_event(trigger)
    assert event["status"] == "timeout"
    with pytest.raises(AirflowFailException, match="cancelled"):
        op.execute_complete(context, event=event)
    assert job(sandbox, trigger.job_id)["state"] == "CANCELLED"


# -- cost limit: nodes x USD/node-hour x time since the job's Slurm Start ----------------------
#: $0.5 per node-second: a 2-node job costs $1 per second of run time.
PRICE = 1800.0


def assert_stopped_at_the_limit(sb, context, job_id: str, message: str, limit: float) -> None:
    assert wait_for(sb, job_id, "CANCELLED")["state"] == "CANCELLED"
    for needle in (f"Slurm job {job_id}", "sim2real-hyperpod", "stopped at the training cost limit",
                   "on 2 node(s) at $1800 per node-hour", f"above the limit ${limit:.2f}", "cancelled (scancel)",
                   "Raise max_budget_usd"):
        assert needle in message, (needle, message)
    record = context["ti"].xcom["job_cost"]
    assert record["stopped_by_budget"] is True and record["num_nodes"] == 2 and record["usd_per_node_hour"] == PRICE
    assert record["cluster_name"] == "sim2real-hyperpod" and record["job_id"] == job_id
    # Stopped before the cost crossed the limit (within one second of run: Slurm's Start is in whole seconds,
    # and a status query on a loaded machine may take longer than the one before), after it had run.
    assert 0 < record["cost_usd"] <= limit + 2 * PRICE / 3600 and record["stopped_at"] > record["started_at"]
    assert record["cost_usd"] == pytest.approx(2 * PRICE * record["run_seconds"] / 3600, abs=0.01)
    assert f"= ${record['cost_usd']:.2f}" in message


def test_running_job_over_the_cost_limit_is_scancelled_and_fails_without_retry(sandbox, context):
    op = make_operator(sandbox, "t-cost", SLEEP_SECONDS="60")
    op.num_nodes, op.cost_limit_usd, op.usd_per_node_hour = "2", "6", str(PRICE)  # templated: strings
    trigger, _ = defer(op, context)
    assert (trigger.num_nodes, trigger.cost_limit_usd, trigger.usd_per_node_hour) == (2, 6.0, PRICE)
    event = first_event(trigger)
    assert event["status"] == "failure" and event["reason"] == "cost_limit" and event["state"] == "RUNNING"
    with pytest.raises(AirflowFailException) as err:
        op.execute_complete(context, event=event)
    assert_stopped_at_the_limit(sandbox, context, trigger.job_id, str(err.value), 6.0)


@pytest.mark.parametrize("limit", [10_000.0, None], ids=["below-the-limit", "no-limit"])
def test_job_within_the_limit_or_without_one_completes_with_its_run_window_and_cost(sandbox, context, limit):
    name = f"t-cost-ok-{limit}".replace(".", "-")
    op = make_operator(sandbox, name, SLEEP_SECONDS="2")
    op.num_nodes, op.cost_limit_usd, op.usd_per_node_hour = 2, limit, PRICE
    trigger, _ = defer(op, context)
    result = op.execute_complete(context, event=first_event(trigger))
    assert result["state"] == "COMPLETED" and "job_cost" not in context["ti"].xcom
    slurm_job = job(sandbox, result["job_id"])
    # started_at/stopped_at: the job's Slurm Start/End (whole seconds), not the submit time.
    assert result["started_at"] == pytest.approx(int(slurm_job["start_time"]), abs=1)
    assert result["stopped_at"] == pytest.approx(int(slurm_job["end_time"]), abs=1)
    assert result["stopped_at"] - result["started_at"] >= 1
    assert result["num_nodes"] == 2 and result["usd_per_node_hour"] == PRICE
    assert result["cost_usd"] == pytest.approx(2 * PRICE * (result["stopped_at"] - result["started_at"]) / 3600)


def test_without_a_price_there_is_no_cost_but_the_run_window_is_reported(sandbox, context):
    op = make_operator(sandbox, "t-cost-noprice", nodes=1)
    op.num_nodes, op.cost_limit_usd = 1, 0.0  # a limit of $0 without a price: not checked
    trigger, _ = defer(op, context)
    result = op.execute_complete(context, event=first_event(trigger))
    assert result["state"] == "COMPLETED" and result["cost_usd"] is None and result["started_at"] is not None


def test_cost_arguments_are_validated_with_the_field_name(sandbox, context):
    op = make_operator(sandbox, "t-cost-bad")
    op.cost_limit_usd = "lots"
    with pytest.raises(ValueError, match="cost_limit_usd"):
        op.execute(context)
    op = make_operator(sandbox, "t-cost-bad")
    op.num_nodes = 0
    with pytest.raises(ValueError, match="num_nodes must be >= 1"):
        op.execute(context)


def test_default_wait_ends_before_the_task_execution_timeout():
    import datetime as dt

    op = HyperPodSlurmJobOperator(
        task_id="train_policy", cluster_name="c", submit_host_tag_key="k", submit_host_tag_value="v", job_name="j",
        submit_commands=["true"], poll_interval=30, execution_timeout=dt.timedelta(hours=12))
    total = op._attempts() * (op.poll_interval + 1)  # each status query takes at least a second
    assert 0.75 * 12 * 3600 < total < op._attempts() * (op.poll_interval + 5) < 12 * 3600


def test_submit_commands_run_under_sh(tmp_path):
    """AWS-RunShellScript uses sh (dash): the generated lines must still run with bash semantics."""
    import shutil
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"squeue": "", "sacct": "", "sbatch": "echo 77"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    script = "#!/bin/bash\necho \"it's ${HOME:-x} $(date)\"\n[[ -n x ]] && echo ok\n"
    commands = slurm.submit_commands(script_path=str(tmp_path / "jobs/j.sbatch"), script_text=script, job_name="j",
                                     log_dir=str(tmp_path / "logs"))
    sh = shutil.which("dash") or "sh"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = subprocess.run([sh, "-c", "\n".join(commands)], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert slurm.parse_submit_output(out.stdout) == ("77", False)
    assert (tmp_path / "jobs/j.sbatch").read_text() == script
    (bin_dir / "sacct").write_text("#!/bin/sh\nprintf '5|FAILED\\n6|COMPLETED\\n6.batch|COMPLETED\\n'\n")
    out = subprocess.run([sh, "-c", "\n".join(commands)], capture_output=True, text=True, env=env, check=False)
    assert slurm.parse_submit_output(out.stdout) == ("6", True), out.stderr

    def fresh(start: str):
        run = subprocess.run([sh, "-c", "\n".join([f"export {slurm.START_ENV}={start}", *commands])],
                             capture_output=True, text=True, env=env, check=False)
        assert run.returncode == 0, run.stderr
        return run.stdout

    # a fresh start does not report the COMPLETED job: it submits
    assert slurm.parse_superseded(fresh("afresh")) == [] and slurm.parse_submit_output(fresh("afresh")) == ("77", False)
    (bin_dir / "squeue").write_text("#!/bin/sh\nprintf '8\\n9\\n'\n")
    out = fresh("afresh")  # active jobs of the run: named for the operator to cancel, nothing submitted
    assert slurm.parse_superseded(out) == ["8", "9"] and slurm.SUBMIT_MARKER not in out
    assert slurm.parse_submit_output(fresh("new")) == ("77", False)  # after the cancel: submits without looking


def test_no_submit_host_is_a_clear_error(sandbox, context):
    op = make_operator(sandbox, "t-nohost")
    op.submit_host_tag_value = "no-such-head"
    with pytest.raises(ValueError, match="No EC2 instance .* tagged sim2real:role=no-such-head"):
        op.execute(context)


# -- sim2real.orchestration.slurm text helpers --------------------------------------------------------------

@pytest.mark.parametrize("stdout, expected", [
    ("sacct|COMPLETED|0:0\n", ("COMPLETED", "0:0")),
    ("sacct|CANCELLED by 0|0:15\n", ("CANCELLED", "0:15")),
    ("sacct|OUT_OF_MEMORY|0:125\n", ("OUT_OF_MEMORY", "0:125")),
    ("scontrol|JobId=7 JobName=x JobState=PENDING Reason=Resources ExitCode=0:0\n", ("PENDING", "0:0")),
    ("unknown|\n", ("UNKNOWN", "")),
    ("sacct|RUNNING|0:0|2026-11-30T03:50:33|Unknown\nstart|1796010633\nclock|1796010712\n", ("RUNNING", "0:0")),
])
def test_parse_status_output(stdout, expected):
    assert slurm.parse_status_output(stdout) == expected


def test_run_window_from_slurm_start_else_first_seen_running():
    times = slurm.parse_status_times("sacct|RUNNING|0:0|x|Unknown\nstart|1000\nclock|1090\n")
    assert times == {"start": 1000.0, "end": None, "clock": 1090.0}
    # Elapsed on the head node's clock (the Airflow worker's `now` may differ).
    assert slurm.run_window(times, None, now=5000.0) == (1000.0, None, 90.0)
    assert slurm.run_window({**times, "end": 1060.0}, None, now=5000.0) == (1000.0, 1060.0, 60.0)
    # scontrol's EndTime of a running job is its time limit, in the future: not an end.
    assert slurm.run_window({**times, "end": 99999.0}, None, now=5000.0) == (1000.0, None, 90.0)
    # No Slurm Start (e.g. accounting off): from when the job was first seen RUNNING; PENDING: nothing.
    assert slurm.run_window(slurm.parse_status_times("scontrol|JobState=RUNNING\n"), 4900.0, 5000.0) == \
        (4900.0, None, 100.0)
    assert slurm.run_window(slurm.parse_status_times("scontrol|JobState=PENDING\n"), None, 5000.0) == \
        (None, None, None)
    assert slurm.run_window(times, None, 5000.0, ended=True) == (1000.0, 1090.0, 90.0)


def test_status_commands_convert_slurm_times_on_the_head_node(tmp_path):
    """Start/End (local time, as Slurm prints them) become epoch seconds with the head node's ``date``."""
    import shutil
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\necho 'RUNNING|0:0|2026-01-02T03:04:05|Unknown'\n")
    (bin_dir / "sacct").chmod(0o755)
    sh = shutil.which("dash") or "sh"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TZ": "UTC"}
    out = subprocess.run([sh, "-c", "\n".join(slurm.status_commands("12"))], capture_output=True, text=True,
                         env=env, check=False)
    assert out.returncode == 0, out.stderr
    times = slurm.parse_status_times(out.stdout)
    assert slurm.parse_status_output(out.stdout) == ("RUNNING", "0:0")
    assert times["start"] == 1767323045.0 and times["end"] is None  # 2026-01-02T03:04:05Z
    assert abs(times["clock"] - time.time()) < 60


def test_parse_submit_output_and_refusals():
    assert slurm.parse_submit_output("noise\nsim2real-slurm-job-id=42 reattached=0\n") == ("42", False)
    assert slurm.parse_submit_output("sim2real-slurm-job-id=7 reattached=1") == ("7", True)
    with pytest.raises(ValueError, match="no Slurm job id"):
        slurm.parse_submit_output("sbatch: error: Batch job submission failed")
    assert slurm.parse_superseded("sim2real-slurm-superseded=12\nnoise\nsim2real-slurm-superseded=13\n") == [
        "12", "13"]
    with pytest.raises(ValueError, match="digits"):
        slurm.parse_superseded("sim2real-slurm-superseded=12; rm -rf /")
    with pytest.raises(ValueError, match="digits"):
        slurm.status_commands("1; rm -rf /")


def test_render_script_refuses_unsafe_sbatch_values():
    with pytest.raises(ValueError, match="log_path"):
        slurm.render_script(job_name="j", num_nodes=1, log_path="/fsx/a b.out", environment={}, launcher="/l",
                            time_limit_minutes=60)
    with pytest.raises(ValueError, match="num_nodes"):
        slurm.render_script(job_name="j", num_nodes=0, log_path="/fsx/a.out", environment={}, launcher="/l",
                            time_limit_minutes=60)
    with pytest.raises(ValueError, match="time_limit_minutes"):
        slurm.render_script(job_name="j", num_nodes=1, log_path="/fsx/a.out", environment={}, launcher="/l",
                            time_limit_minutes=0)
    text = slurm.render_script(job_name="j", num_nodes=3, log_path="/fsx/%x-%j.out", launcher="/l",
                               time_limit_minutes=90,
                               environment={"OUTPUT_URI": "s3://b/x y;rm"}, use_container_image=True,
                               container_mounts="/fsx:/fsx")
    assert "#SBATCH --time=90" in text
    assert "#SBATCH --nodes=3" in text and "export OUTPUT_URI='s3://b/x y;rm'" in text
    assert "USE_CONTAINER_IMAGE=1" in text and "--container-image" in text
