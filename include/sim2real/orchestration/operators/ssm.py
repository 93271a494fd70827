"""Run a shell command on the evaluation workstation (found by tag) with SSM Run Command.

Extends the provider's ``SsmRunCommandOperator`` and fixes its gaps (see the class docstring).
Sources: AWS Systems Manager API Reference (SendCommand, GetCommandInvocation, CancelCommand,
DescribeInstanceInformation), ``AWS-RunShellScript`` document parameters (``commands``,
``executionTimeout``, default 3600 s), Amazon EC2 API Reference (DescribeInstances,
StartInstances, StopInstances).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.operators.ssm import SsmRunCommandOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from sim2real.contract import evaluator
from sim2real.orchestration.hooks.workstation import (
    SSM_INLINE_OUTPUT_LIMIT,
    WorkstationHook,
    ssm_output_key,
)
from sim2real.orchestration.links.ssm import SsmRunCommandLink, WorkstationInstanceLink
from sim2real.orchestration.stop_rule import operator_should_stop
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.ssm import WorkstationCommandTrigger, WorkstationInstanceTrigger
from sim2real.orchestration.waits.core import Step, event_outcome, settle_now
from sim2real.orchestration.waits.ssm import invocations_response, ssm_command_step

if TYPE_CHECKING:
    from airflow.sdk import Context

#: XCom keys pushed before waiting, so teardown and retries can find what this try did.
XCOM_STARTED_INSTANCE = "started_instance"
XCOM_INSTANCE_ID = "instance_id"
#: Tag put on a workstation this run started (value: the run key), so a retried try and the stop
#: teardown still know who started it (a retry's XComs start empty).
STARTED_BY_TAG = "sim2real:started-by-run"


def _context_run_key(context: Any) -> str | None:
    """The run key of the running DAG run, or None outside one (unit tests with a bare context)."""
    from sim2real.contract.run_key import make_run_key

    try:
        dag_id = context["dag"].dag_id
        run_id = context["run_id"]
    except (KeyError, AttributeError, TypeError):
        return None
    return make_run_key(dag_id, run_id) if dag_id and run_id else None


def _tag_value(instance: dict[str, Any], key: str) -> str | None:
    return next((t.get("Value") for t in instance.get("Tags") or [] if t.get("Key") == key), None)
XCOM_COMMAND_ID = "command_id"


class WorkstationCommandOperator(SsmRunCommandOperator):
    """Run ``commands`` with ``AWS-RunShellScript`` on the one EC2 instance tagged ``key=value``.

    Steps: DescribeInstances by tag (exactly one non-terminated instance, else ``ValueError``);
    if it is stopped and ``start_if_stopped``, StartInstances, then wait deferred (no worker slot) until it runs
    with its SSM agent ``Online`` (:class:`~sim2real.orchestration.triggers.ssm.WorkstationInstanceTrigger`; a
    stopping one is first waited out until stopped; a stopped instance with ``start_if_stopped=False`` →
    ``AirflowException``);
    SendCommand to that instance id with ``executionTimeout`` and S3 output; wait deferred on every
    instance the command targets (:class:`~sim2real.orchestration.triggers.ssm.WorkstationCommandTrigger`,
    step function :func:`~sim2real.orchestration.waits.ssm.ssm_command_step`; a command already over is
    settled without deferring); read the full stdout from S3.

    Gaps of the provider operator fixed here: tag targets are resolved to instance ids first, so
    the wait never skips them; stdout is read from S3, not the 24,000-character
    ``StandardOutputContent``; ``executionTimeout`` is always set (the document default is one
    hour); Failed, Cancelled, TimedOut and Cancelling are failures (botocore's ``CommandExecuted``
    waiter); ``on_kill`` (in the worker) and the trigger's ``on_kill`` (deferred) call CancelCommand.

    :param workstation_tag_key: EC2 tag key selecting the workstation.
    :param workstation_tag_value: EC2 tag value selecting the workstation.
    :param commands: shell lines, run in order by ``AWS-RunShellScript`` (templated).
    :param execution_timeout_seconds: ``executionTimeout`` of the document, seconds (1..172800).
    :param output_s3_bucket: bucket Run Command writes stdout/stderr to.
    :param output_s3_key_prefix: key prefix of the output (``.../<command-id>/<instance-id>/...``).
    :param start_if_stopped: start a stopped workstation (then ``started_instance`` is True).
    :param waiter_delay: seconds between status polls (default 15).
    :param waiter_max_attempts: polls before failing; default covers the execution timeout + 10 min.
    :param instance_ready_timeout_seconds: how long to wait for running + agent Online (seconds).

    :return: ``{"command_id", "instance_id", "status": "Success", "response_code": int,
        "stdout": str (full), "stdout_s3_uri": "s3://...", "started_instance": bool}``.
        XCom keys ``started_instance``, ``instance_id`` and ``command_id`` are pushed before the wait.
    :raises ValueError: bad arguments; no/several instances carry the tag.
    :raises AirflowException: the command ended Failed/Cancelled/TimedOut/Cancelling (message:
        instance, status, exit code, the end of stderr) or the wait timed out.
    """

    aws_hook_class = WorkstationHook
    template_fields: Sequence[str] = aws_template_fields(
        "workstation_tag_key",
        "workstation_tag_value",
        "commands",
        "execution_timeout_seconds",
        "output_s3_bucket",
        "output_s3_key_prefix",
    )
    template_fields_renderers = {"commands": "json"}
    operator_extra_links = (SsmRunCommandLink(), WorkstationInstanceLink())

    def __init__(
        self,
        *,
        workstation_tag_key: str,
        workstation_tag_value: str,
        commands: list[str],
        execution_timeout_seconds: int,
        output_s3_bucket: str,
        output_s3_key_prefix: str,
        start_if_stopped: bool = True,
        waiter_delay: int = 15,
        waiter_max_attempts: int | None = None,
        instance_ready_timeout_seconds: int = 600,
        **kwargs,
    ):
        super().__init__(
            document_name="AWS-RunShellScript",
            run_command_kwargs=None,
            wait_for_completion=True,
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts or 1,
            fail_on_nonzero_exit=True,
            deferrable=True,  # the wait is always deferred (WorkstationCommandTrigger)
            **kwargs,
        )
        self.workstation_tag_key = workstation_tag_key
        self.workstation_tag_value = workstation_tag_value
        self.commands = commands
        self.execution_timeout_seconds = execution_timeout_seconds
        self.output_s3_bucket = output_s3_bucket
        self.output_s3_key_prefix = output_s3_key_prefix
        self.start_if_stopped = start_if_stopped
        self._waiter_max_attempts_arg = waiter_max_attempts
        self.instance_ready_timeout_seconds = instance_ready_timeout_seconds
        self._command_id: str | None = None
        self._instance_id: str | None = None

    # -- validation ---------------------------------------------------------------------------
    def _validate(self) -> int:
        if not self.commands or isinstance(self.commands, str):
            raise ValueError("commands must be a non-empty list of shell lines")
        if not all(isinstance(c, str) and c for c in self.commands):
            raise ValueError(f"every command must be a non-empty string, got {self.commands!r}")
        try:
            timeout = int(self.execution_timeout_seconds)
        except (TypeError, ValueError) as err:
            raise ValueError(f"execution_timeout_seconds must be an integer, got {self.execution_timeout_seconds!r}") from err
        if not 1 <= timeout <= 172_800:
            raise ValueError(f"execution_timeout_seconds must be 1..172800 (AWS-RunShellScript), got {timeout}")
        if not self.output_s3_bucket:
            raise ValueError("output_s3_bucket is required: the full stdout is read from S3")
        if self._waiter_max_attempts_arg is None:
            self.waiter_max_attempts = max(1, (timeout + 600) // max(1, self.waiter_delay) + 1)
        return timeout

    # -- instance -----------------------------------------------------------------------------
    def _ensure_running(self, context: Context, started_before: bool = False) -> tuple[str, bool]:
        instance = self.hook.find_instance_by_tag(self.workstation_tag_key, self.workstation_tag_value)
        instance_id, state = instance["InstanceId"], instance["State"]["Name"]
        self.log.info("Workstation %s=%s is %s (%s)", self.workstation_tag_key, self.workstation_tag_value, instance_id, state)
        run_key = _context_run_key(context)
        # A retried try finds the instance an earlier try of this run started (tagged below); a resume after the
        # wait for it is told so (``started_before``).
        started = started_before or (run_key is not None and _tag_value(instance, STARTED_BY_TAG) == run_key)
        if started:
            self.log.info("Workstation %s was started by an earlier try of this run (%s)", instance_id, run_key)
        if state in ("stopped", "stopping"):
            if not self.start_if_stopped:
                raise AirflowException(
                    f"Workstation {instance_id} is {state} and start_if_stopped=False. Start it "
                    f"(aws ec2 start-instances --instance-ids {instance_id}) or set start_if_stopped=True."
                )
            if state == "stopping":  # StartInstances needs it stopped: wait (deferred), then start on resume
                self._defer_for_instance(instance_id, "stopped", started)
            if run_key:
                self.hook.ec2.create_tags(Resources=[instance_id], Tags=[{"Key": STARTED_BY_TAG, "Value": run_key}])
            self.hook.ec2.start_instances(InstanceIds=[instance_id])
            started = True
            # Pushed now so the teardown stops it even if everything below fails.
            context["ti"].xcom_push(key=XCOM_STARTED_INSTANCE, value=True)
            self.log.info("Started workstation %s", instance_id)
            self._defer_for_instance(instance_id, "running", started)
        if state != "running" or self.hook.agent_ping_status(instance_id) != "Online":
            self._defer_for_instance(instance_id, "running", started)
        return instance_id, started

    def _defer_for_instance(self, instance_id: str, until: str, started: bool) -> None:
        """Wait in the triggerer (:class:`~sim2real.orchestration.triggers.ssm.WorkstationInstanceTrigger`) until
        the workstation is ``running`` with its SSM agent Online (at most ``instance_ready_timeout_seconds``), or
        ``stopped``; :meth:`resume_for_instance` then runs :meth:`execute` again, which finds it ready."""
        delay = max(1, int(self.waiter_delay or 0))
        attempts = max(1, int(self.instance_ready_timeout_seconds) // delay + 1)
        self.log.info("Workstation %s: waiting in the triggerer until it is %s (polls %s s apart, at most %s s)",
                      instance_id, "running with its SSM agent Online" if until == "running" else until, delay,
                      self.instance_ready_timeout_seconds)
        defer_wait(self, WorkstationInstanceTrigger, method_name="resume_for_instance",
                   kwargs={"started_instance": started}, waiter_delay=delay, waiter_max_attempts=attempts,
                   instance_id=instance_id, until=until)

    def resume_for_instance(self, context: Context, event: dict[str, Any] | None = None,
                            started_instance: bool = False) -> dict[str, Any]:
        """Resume after :meth:`_defer_for_instance`: on ``success`` run :meth:`execute` again (it finds the
        workstation ready, or starts the stopped one); otherwise fail naming the instance, its state and the fix."""
        event = event or {}
        status, message = event_outcome(event, f"workstation {event.get('instance_id')}")
        if status != "success":
            raise AirflowException(
                f"Workstation {event.get('instance_id')} did not become ready ({status}): {message}. Check that the "
                "instance starts (EC2 console: state, status checks), that the amazon-ssm-agent service runs and "
                "that its instance profile has AmazonSSMManagedInstanceCore; then clear this task.")
        return self.execute(context, started_instance=started_instance)

    # -- execute ------------------------------------------------------------------------------
    def execute(self, context: Context, started_instance: bool = False) -> dict[str, Any]:
        """Run the command (see the class); ``started_instance``: this try already started the workstation (a
        resume after :meth:`_defer_for_instance`)."""
        timeout = self._validate()
        instance_id, started = self._ensure_running(context, started_before=started_instance)
        self._instance_id = instance_id
        context["ti"].xcom_push(key=XCOM_STARTED_INSTANCE, value=started)
        context["ti"].xcom_push(key=XCOM_INSTANCE_ID, value=instance_id)

        response = self.hook.conn.send_command(
            DocumentName=self.document_name,
            InstanceIds=[instance_id],
            Parameters={"commands": list(self.commands), "executionTimeout": [str(timeout)]},
            OutputS3BucketName=self.output_s3_bucket,
            OutputS3KeyPrefix=self.output_s3_key_prefix.strip("/"),
            Comment=f"{context['ti'].dag_id}.{context['ti'].task_id}"[:100],
        )
        command_id = response["Command"]["CommandId"]
        self._command_id = command_id
        context["ti"].xcom_push(key=XCOM_COMMAND_ID, value=command_id)
        region, partition = self.hook.conn_region_name, self.hook.conn_partition
        SsmRunCommandLink.persist(
            context=context, operator=self, region_name=region, aws_partition=partition, command_id=command_id
        )
        WorkstationInstanceLink.persist(
            context=context, operator=self, region_name=region, aws_partition=partition, instance_id=instance_id
        )
        self.log.info("Sent SSM command %s to %s (executionTimeout %s s)", command_id, instance_id, timeout)

        targets = list(response["Command"].get("InstanceIds") or [instance_id])  # every instance it targets
        over = self._over(command_id, targets)  # already over: no trigger to race
        if over is not None:
            self.log.info("SSM command %s is already over (%s): not deferring", command_id, over.outcome)
            # A command that ended Failed/TimedOut/Cancelled on an instance is the command's failure; an API error
            # (no command status: e.g. AccessDenied on GetCommandInvocation) is not, and the command may still run.
            if over.outcome == "failure" and over.payload.get("instance_id") and over.payload.get("command_status"):
                raise AirflowFailException(self._failure_message(
                    command_id, over.payload["instance_id"], over.payload["command_status"],
                    over.payload.get("exit_code", -1)))
            if over.outcome != "success":
                raise AirflowException(f"SSM command {command_id} could not be followed: {over.reason}; it was "
                                       f"cancelled on {', '.join(targets)}." + self._cancel(command_id, targets))
            return self._result(command_id, instance_id, started)
        defer_wait(self, WorkstationCommandTrigger, method_name="execute_complete", kwargs={"started_instance": started},
                   waiter_delay=self.waiter_delay, waiter_max_attempts=self.waiter_max_attempts,
                   command_id=command_id, instance_ids=targets)

    def _over(self, command_id: str, instance_ids: list[str]) -> Step | None:
        """The wait's terminal step when the command already ended on every instance (or failed on one),
        else None: one ``GetCommandInvocation`` per instance, decided by
        :func:`~sim2real.orchestration.waits.ssm.ssm_command_step` (an invocation SSM does not list yet is
        not over)."""
        from botocore.exceptions import ClientError

        invocations = []
        for instance_id in instance_ids:
            try:
                invocations.append(self.hook.get_command_invocation(command_id, instance_id))
            except ClientError as error:
                invocations.append({**error.response, "InstanceId": instance_id})
        return settle_now(ssm_command_step, invocations_response(invocations),
                          {"command_id": command_id, "instance_ids": list(instance_ids)})

    def _cancel(self, command_id: str, instance_ids: list[str]) -> str:
        try:
            self.hook.cancel_command(command_id, list(instance_ids))
            return ""
        except Exception as error:  # the failure message matters more than the cancel
            return f" (CancelCommand failed: {error})"

    # A command that ended Failed / TimedOut / Cancelled is a verdict on this evaluation (the evaluator
    # exits non-zero only when it could not evaluate, e.g. a sha256 mismatch): raised as
    # AirflowFailException, not retried. Errors reaching SSM stay AirflowException (retried).
    def _failure_message(self, command_id: str, instance_id: str, status: str, exit_code: Any) -> str:
        stderr = None
        try:
            stderr = self.hook.read_output(self.output_s3_bucket, self.output_s3_key_prefix, command_id, instance_id, "stderr")
        except Exception as error:
            self.log.warning("Could not read stderr of %s from S3: %s", command_id, error)
        tail = f"\n--- end of stderr ---\n{stderr[-2000:]}" if stderr else ""
        hint = {
            "TimedOut": (
                f"it ran longer than executionTimeout={self.execution_timeout_seconds} s; "
                "raise execution_timeout_seconds"
            ),
            "Cancelled": "it was cancelled (console, CLI or a killed task)",
            "Cancelling": "it is being cancelled",
        }.get(status, "the command exited non-zero; see stderr")
        if status == "Failed" and evaluator.EXECUTABLE in " ".join(map(str, self.commands or [])):
            hint = evaluator.failure_hint(exit_code, stderr) or hint  # what the evaluator's exit code means
        return (
            f"SSM command {command_id} on workstation {instance_id} ended {status} (exit code {exit_code}): {hint}. "
            f"Output: s3://{self.output_s3_bucket}/{ssm_output_key(self.output_s3_key_prefix, command_id, instance_id, '')}{tail}"
        )

    def _result(self, command_id: str, instance_id: str, started: bool) -> dict[str, Any]:
        inv = self.hook.get_command_invocation(command_id, instance_id)
        status = inv.get("Status", "")
        if status != "Success":
            raise AirflowFailException(self._failure_message(command_id, instance_id, status, inv.get("ResponseCode", -1)))
        key = ssm_output_key(self.output_s3_key_prefix, command_id, instance_id, "stdout")
        stdout = self.hook.read_output(self.output_s3_bucket, self.output_s3_key_prefix, command_id, instance_id)
        if stdout is None:
            inline = inv.get("StandardOutputContent", "") or ""
            if len(inline) >= SSM_INLINE_OUTPUT_LIMIT:
                raise AirflowException(
                    f"stdout of SSM command {command_id} is truncated at {SSM_INLINE_OUTPUT_LIMIT} characters and "
                    f"s3://{self.output_s3_bucket}/{key} is missing; check the instance profile can write to the bucket."
                )
            self.log.warning("No stdout object at s3://%s/%s; using the inline output (%d chars)", self.output_s3_bucket, key, len(inline))
            stdout = inline
        return {
            "command_id": command_id,
            "instance_id": instance_id,
            "status": status,
            "response_code": inv.get("ResponseCode"),
            "stdout": stdout,
            "stdout_s3_uri": f"s3://{self.output_s3_bucket}/{key}",
            "started_instance": started,
        }

    def execute_complete(  # type: ignore[override]
        self, context: Context, event: dict[str, Any] | None = None, started_instance: bool = False
    ) -> dict[str, Any]:
        """Resume after the trigger: raise on failure/timeout, else read the result."""
        status, message = event_outcome(event, f"SSM command {self._command_id}")
        command_id = event["command_id"]
        if status == "failure" and event.get("instance_id") and event.get("command_status"):
            raise AirflowFailException(self._failure_message(command_id, event["instance_id"],
                                                             event["command_status"], event.get("exit_code", -1)))
        if status != "success":
            pending = list(event.get("pending") or {})
            raise AirflowException(
                f"SSM command {command_id} did not finish ({status}): {message}"
                + (f"; it was cancelled on {', '.join(pending)}." + self._cancel(command_id, pending) if pending else "")
            )
        instance_id = (event.get("instance_ids") or [None])[0]
        return self._result(command_id, instance_id, bool(started_instance))

    def on_kill(self) -> None:
        """CancelCommand for the command this try sent, while the task runs in the worker (deferred: the
        trigger's ``on_kill``)."""
        if self._command_id and operator_should_stop(self, f"SSM command {self._command_id}"):
            self.log.info("Cancelling SSM command %s", self._command_id)
            self.hook.cancel_command(self._command_id, [self._instance_id] if self._instance_id else None)


class WorkstationStopOperator(AwsBaseOperator[WorkstationHook]):
    """Stop the workstation only if this DAG run started it (run it with ``trigger_rule="all_done"``).

    ``started`` decides; when it is ``None`` the operator reads the XCom keys
    ``started_instance`` and ``instance_id`` pushed by ``command_task_id`` (a
    :class:`WorkstationCommandOperator`). A string ``"True"``/``"False"`` (rendered template) is
    accepted. When the XCom says no (a retried try), the instance tag ``sim2real:started-by-run``
    equal to this run's key still says yes. When no instance id is known at all (the command task never ran,
    e.g. a sweep failed after its candidates' evaluations had started the workstation), the workstation is
    found by ``workstation_tag_key`` / ``workstation_tag_value`` and stopped only if its
    ``sim2real:started-by-run`` tag is this run's key.

    :param instance_id: the instance to stop; default: the XCom ``instance_id`` of ``command_task_id``.
    :param workstation_tag_key: with ``workstation_tag_value``, the workstation's tag (EC2 ``DescribeInstances``
        filter), used only when no instance id is known.
    :param started: whether this run started it; default: the XCom ``started_instance``.
    :param command_task_id: task id of the command operator to read XComs from.
    :param wait_for_stopped: wait for ``instance_stopped`` (botocore EC2 waiter).
    :return: ``{"instance_id": str | None, "stopped": bool, "reason": str}``.
    :raises ValueError: ``started`` is true but no instance id is known.
    """

    aws_hook_class = WorkstationHook
    template_fields: Sequence[str] = aws_template_fields("instance_id", "started", "command_task_id",
                                                        "workstation_tag_key", "workstation_tag_value")

    def __init__(
        self,
        *,
        instance_id: str | None = None,
        started: bool | str | None = None,
        command_task_id: str | None = None,
        workstation_tag_key: str | None = None,
        workstation_tag_value: str | None = None,
        wait_for_stopped: bool = True,
        waiter_delay: int = 15,
        waiter_max_attempts: int = 40,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.instance_id = instance_id
        self.workstation_tag_key = workstation_tag_key
        self.workstation_tag_value = workstation_tag_value
        self.started = started
        self.command_task_id = command_task_id
        self.wait_for_stopped = wait_for_stopped
        self.waiter_delay = waiter_delay
        self.waiter_max_attempts = waiter_max_attempts

    def _started_by_this_run(self, run_key: str) -> str | None:
        """The workstation (by its tag) that this run started and that is still pending or running, else None
        (EC2 ``DescribeInstances`` with tag and state filters)."""
        filters = [{"Name": f"tag:{self.workstation_tag_key}", "Values": [self.workstation_tag_value]},
                   {"Name": f"tag:{STARTED_BY_TAG}", "Values": [run_key]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        reservations = self.hook.ec2.describe_instances(Filters=filters)["Reservations"]
        found = [i["InstanceId"] for r in reservations for i in r.get("Instances") or []]
        if found:
            self.log.info("No instance id from %s; workstation %s carries %s=%s: this run started it",
                          self.command_task_id, found[0], STARTED_BY_TAG, run_key)
        return found[0] if found else None

    @staticmethod
    def _as_bool(value: Any) -> bool:
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)

    def execute(self, context: Context) -> dict[str, Any]:
        started, instance_id = self.started, self.instance_id
        if self.command_task_id:
            ti = context["ti"]
            if started is None:
                started = ti.xcom_pull(task_ids=self.command_task_id, key=XCOM_STARTED_INSTANCE)
            if not instance_id:
                instance_id = ti.xcom_pull(task_ids=self.command_task_id, key=XCOM_INSTANCE_ID)
        run_key = _context_run_key(context)
        if not instance_id and run_key and self.workstation_tag_key and self.workstation_tag_value:
            instance_id = self._started_by_this_run(run_key)
            started = True if instance_id else started
        if not self._as_bool(started) and instance_id and run_key:
            # The XCom is per try; the instance tag survives retries of the command task.
            found = self.hook.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
            tags = found[0]["Instances"][0] if found and found[0].get("Instances") else {}
            if _tag_value(tags, STARTED_BY_TAG) == run_key:
                started = True
        if not self._as_bool(started):
            reason = "this run did not start the workstation" if started is not None else "no record that this run started it"
            self.log.info("Not stopping workstation %s: %s", instance_id, reason)
            return {"instance_id": instance_id, "stopped": False, "reason": reason}
        if not instance_id:
            raise ValueError("started=True but no instance_id (pass instance_id or command_task_id)")
        self.hook.ec2.stop_instances(InstanceIds=[instance_id])
        if run_key:
            self.hook.ec2.delete_tags(Resources=[instance_id], Tags=[{"Key": STARTED_BY_TAG}])
        self.log.info("Stopping workstation %s (started by this run)", instance_id)
        result = {"instance_id": instance_id, "stopped": True, "reason": "started by this run"}
        if self.wait_for_stopped:
            defer_wait(self, WorkstationInstanceTrigger, method_name="execute_complete", kwargs={"result": result},
                       waiter_delay=self.waiter_delay, waiter_max_attempts=self.waiter_max_attempts,
                       instance_id=instance_id, until="stopped")
        return result

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None,
                         result: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the wait for ``stopped``: the result, or a failure naming the instance and its state."""
        event = event or {}
        status, message = event_outcome(event, f"workstation {event.get('instance_id')}")
        if status != "success":
            raise AirflowException(f"Workstation {event.get('instance_id')} was stopped but is not stopped yet "
                                   f"({status}): {message}. It may still bill: check it in the EC2 console.")
        # The deferral kwargs are not handed back by every runner (dag.test passes only the event).
        return result or {"instance_id": event.get("instance_id"), "stopped": True, "reason": "started by this run"}
