"""The pieces of ``make ui`` that need no browser: the served sandbox process and the stack's guards."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import boto3
import pytest

from sim2real.dev.sandbox.__main__ import read_env_file, write_env_file
from sim2real.dev.ui import UiStack, UiStackError


def test_env_file_round_trips_json_and_quotes(tmp_path):
    env = {"AIRFLOW_VAR_X": json.dumps({"name": "it's", "list": [1, "a b"]}), "EMPTY": "", "PLAIN": "v"}
    path = tmp_path / "sandbox.env"
    write_env_file(path, env)
    assert read_env_file(path) == env
    # The file is also what a shell loads: `set -a; . FILE`.
    out = subprocess.run(["bash", "-c", f'set -a; . "{path}"; printf %s "$AIRFLOW_VAR_X"'],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"name": "it's", "list": [1, "a b"]}


def test_env_file_refuses_multi_line_values(tmp_path):
    with pytest.raises(ValueError, match="MULTI"):
        write_env_file(tmp_path / "e.env", {"MULTI": "a\nb", "OK": "c"})
    (tmp_path / "bad.env").write_text("JUST_A_WORD\n")
    with pytest.raises(ValueError, match="bad.env:1"):
        read_env_file(tmp_path / "bad.env")


@pytest.mark.integration  # the served sandbox, a subprocess
def test_served_sandbox_writes_the_airflow_env_and_stops_on_sigterm(tmp_path):
    env_file = tmp_path / "sandbox.env"
    proc = subprocess.Popen([sys.executable, "-m", "sim2real.dev.sandbox", "serve", "--env-file", str(env_file),
                             "--work-dir", str(tmp_path / "work"), "--poll-seconds", "3", "--no-mlflow",
                             "--decision", "airflow"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not env_file.exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the served sandbox wrote no env file in 120 s"
            time.sleep(0.2)
        env = read_env_file(env_file)
        connection = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
        config = json.loads(env["AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"])
        assert connection["extra"]["endpoint_url"] == env["AWS_ENDPOINT_URL"]
        assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        assert env["SIM2REAL_POLL_SECONDS"] == "3" and env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] == "True"
        # The provisioned resources are there, answered by the served process.
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.head_bucket(Bucket=config["artifacts_bucket"])
        # --decision airflow: no emulated reviewer decides a package, however often it is looked at.
        sm = boto3.client("sagemaker", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        arn = sm.create_model_package(
            ModelPackageGroupName=config["sagemaker"]["model_package_group"], ModelApprovalStatus="PendingManualApproval",
            CustomerMetadataProperties={"sim2real:run-key": "left-to-airflow"},
            InferenceSpecification={"Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/g:1"}],
                                    "SupportedContentTypes": ["application/json"],
                                    "SupportedResponseMIMETypes": ["application/json"]})["ModelPackageArn"]
        for _ in range(4):  # an emulated reviewer would decide within a second of the first look
            assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"
            time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "SIGTERM received" in out and "[sandbox] stopped" in out
    assert "[sandbox:emulated]" in out
    assert "no emulated reviewer: approve or reject each model package in Airflow" in out
    assert not env_file.exists(), "the env file outlived the sandbox it points at"


def test_ui_stack_refuses_a_port_in_use_before_starting_anything(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = UiStack(tmp_path, api_port=port)
        with pytest.raises(UiStackError, match=f"port {port} .* in use"):
            stack.start(timeout=10)
    assert not (tmp_path / "logs").exists()


def test_a_second_ctrl_c_while_stopping_still_stops_both_process_groups(tmp_path, monkeypatch):
    """Ctrl-C during stop() must not abort it: the children run in their own sessions and would be left."""
    import os

    from sim2real.dev import ui

    stack = UiStack(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
             for _ in range(2)]
    stack._airflow, stack._sandbox = procs
    real_stop_group = ui._stop_group

    def impatient_stop_group(proc, sig, grace):
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C again while we wait
        real_stop_group(proc, signal.SIGTERM, grace=5)

    monkeypatch.setattr(ui, "_stop_group", impatient_stop_group)
    before = signal.getsignal(signal.SIGINT)
    try:
        stack.stop()  # raised KeyboardInterrupt before the sandbox's group was stopped
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [proc.wait(timeout=10) is not None for proc in procs] == [True, True]
    assert stack._airflow is None and stack._sandbox is None
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back


def test_stop_with_a_short_airflow_grace_does_not_wait_for_a_slow_component(tmp_path):
    """A component that is slow to exit on standalone's SIGINT (here: one that ignores it) is sent SIGTERM, then
    SIGKILL, with its whole group after ``airflow_grace`` s, not after the default 30 s."""
    stack = UiStack(tmp_path)
    ignores_sigint = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    airflow = subprocess.Popen([sys.executable, "-c", ignores_sigint], start_new_session=True,
                               stdout=subprocess.PIPE)
    airflow.stdout.readline()  # SIGINT is ignored from here on
    stack._airflow = airflow
    started = time.monotonic()
    try:
        stack.stop(airflow_grace=1)
    finally:
        if airflow.poll() is None:
            airflow.kill()
    took = time.monotonic() - started
    assert airflow.wait(timeout=10) == -signal.SIGTERM  # its group's SIGTERM after the grace ended it
    assert took < 10, f"stop took {took:.1f} s with airflow_grace=1"
    assert stack._airflow is None


def test_dag_processor_settings_keep_an_unchanged_dag_active_on_a_busy_machine(tmp_path):
    """A DAG file that takes 10-50 s to parse on a loaded 2-core machine is neither aborted nor deactivated, and
    is not re-parsed every 30 s; an edited file is still parsed again at once (modified_time order)."""
    stack = UiStack(tmp_path / "ui")
    stack.env_file.parent.mkdir(parents=True, exist_ok=True)
    stack.env_file.write_text("")
    env = stack.airflow_env()

    def seconds(key: str) -> float:
        return float(env[key])

    import_timeout = seconds("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT")
    processor_timeout = seconds("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT")
    interval = seconds("AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL")
    stale = seconds("AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD")
    assert import_timeout >= 120  # the 50 s worst parse seen, with room
    assert processor_timeout > import_timeout  # the import's own timeout reports first, with its traceback
    assert interval >= 300  # an unchanged file: no re-parse every 30 s eating a busy machine's CPU
    # Deactivated only after several parses in a row failed: one slow or failed parse never hides the DAG.
    assert stale >= 3 * (interval + processor_timeout)
    assert env["AIRFLOW__DAG_PROCESSOR__FILE_PARSING_SORT_MODE"] == "modified_time"
