"""SSM Run Command responder: SendCommand runs the ``commands`` with ``sh`` on this machine.

moto 5.2.5 marks every command ``Success`` at once with empty output and lacks
ListCommandInvocations, CancelCommand and DescribeInstanceInformation. Here:

* SendCommand → command and invocations ``Pending``, then ``InProgress`` while a thread runs the
  ``commands`` parameter as one script with ``sh`` like AWS-RunShellScript on Linux (``/bin/sh`` is
  dash on Debian/Ubuntu: bash syntax fails here as it does on the node; commands that need bash run it
  themselves, see :func:`sim2real.orchestration.slurm.bash_commands`) (env: ``AWS_ENDPOINT_URL`` + fake credentials, PATH with
  the venv's bin first), honouring the ``executionTimeout`` parameter (default 3600 s, like
  AWS-RunShellScript) → ``TimedOut``; exit 0 → ``Success``, otherwise ``Failed`` with ResponseCode.
  ``TimeoutSeconds`` is the *delivery* timeout in AWS; delivery here is immediate, so it never fires.
* Output goes to ``s3://<OutputS3BucketName>/<OutputS3KeyPrefix>/<command-id>/<instance-id>/
  awsrunShellScript/0.awsrunShellScript/stdout|stderr`` (AWS's layout) in full, while
  GetCommandInvocation's ``StandardOutputContent`` keeps the first 24,000 characters and
  ``StandardErrorContent`` the first 8,000 (AWS API reference, GetCommandInvocation).
* SendCommand by ``InstanceIds`` reaches those instances only (moto sends a command without
  ``Targets`` to every EC2 instance).
* An instance registered with ``env`` (the HyperPod head node) runs its commands with that extra
  environment: the emulated Slurm client (:mod:`~sim2real.dev.sandbox.responders.slurm`) first on PATH.
* DescribeInstanceInformation reports ``Online`` for running instances registered as managed
  (the provisioned workstation), ``ConnectionLost`` when stopped.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult
from moto.ec2.models import ec2_backends
from moto.ssm.models import Command, SimpleSystemManagerBackend
from moto.ssm.responses import SimpleSystemManagerResponse

from sim2real.dev.sandbox._core import PREFIX, Patcher, active, log, safe_thread

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

STDOUT_LIMIT = 24_000
STDERR_LIMIT = 8_000
DEFAULT_EXECUTION_TIMEOUT = 3600
PLUGIN = "aws:runShellScript"


class InvalidInstanceId(ServiceException):
    code = "InvalidInstanceId"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class SsmResponder:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.managed: dict[str, dict[str, Any]] = {}  # instance id -> info
        self.processes: dict[tuple[str, str], subprocess.Popen] = {}
        self.cancelled: set[str] = set()
        self.plugins: dict[tuple[str, str], dict[str, Any]] = {}
        self._threads: list[threading.Thread] = []
        self.instance_env: dict[str, Callable[[], dict[str, str]]] = {}

    def register_instance(self, instance_id: str, computer_name: str = "workstation",
                          env: Callable[[], dict[str, str]] | None = None) -> None:
        """Mark an EC2 instance as SSM-managed (agent installed) so it reports Online while running.

        :param env: called for each command sent to this instance; its variables are added to the
            command's environment (``SIM2REAL_SLURM_BIN`` is put first on PATH): what is installed on
            that host only, e.g. the HyperPod head node's Slurm client.
        """
        self.managed[instance_id] = {"ComputerName": computer_name}
        if env is not None:
            self.instance_env[instance_id] = env

    # -- patches ---------------------------------------------------------------------------
    def install(self, patcher: Patcher) -> None:
        original_send = SimpleSystemManagerBackend.send_command

        def send_command(backend: SimpleSystemManagerBackend, *args: Any, **kwargs: Any) -> Command:
            active().ssm._check_targets(kwargs.get("instance_ids") or [])
            command = original_send(backend, *args, **kwargs)
            active().ssm._accept(command)
            return command

        def list_command_invocations(resp: SimpleSystemManagerResponse) -> ActionResult:
            return ActionResult(active().ssm._list_invocations(resp))

        def cancel_command(resp: SimpleSystemManagerResponse) -> ActionResult:
            active().ssm._cancel(resp._get_param("CommandId"), resp._get_param("InstanceIds") or [])
            return ActionResult({})

        def describe_instance_information(resp: SimpleSystemManagerResponse) -> ActionResult:
            return ActionResult(active().ssm._instance_information(resp))

        original_targets = Command._get_instance_ids_from_targets

        def instance_ids_from_targets(command: Command) -> list[str]:
            # moto 5.2.5 filters EC2 with {} when there are no Targets, which matches EVERY instance: a
            # command sent by InstanceIds went to all of them (the workstation and the HyperPod head node).
            return original_targets(command) if command.targets else []

        patcher.setattr(Command, "_get_instance_ids_from_targets", instance_ids_from_targets)
        patcher.setattr(SimpleSystemManagerBackend, "send_command", send_command)
        patcher.setattr(SimpleSystemManagerResponse, "list_command_invocations", list_command_invocations)
        patcher.setattr(SimpleSystemManagerResponse, "cancel_command", cancel_command)
        patcher.setattr(SimpleSystemManagerResponse, "describe_instance_information", describe_instance_information)

    def shutdown(self) -> None:
        for process in list(self.processes.values()):
            _kill(process)
        for thread in self._threads:
            thread.join(timeout=10)

    # -- SendCommand -----------------------------------------------------------------------
    def _check_targets(self, instance_ids: list[str]) -> None:
        """AWS refuses SendCommand for instances that are not running managed nodes (InvalidInstanceId)."""
        ec2 = ec2_backends[self.sandbox.account_id][self.sandbox.region]
        states = {i.id: i.state for r in ec2.all_reservations() for i in r.instances}
        bad = [i for i in instance_ids if i not in self.managed or states.get(i) != "running"]
        if bad:
            raise InvalidInstanceId(
                "Instances " + str(bad) + " not in a valid state for account " + self.sandbox.account_id
                + " (not running, or no SSM agent registered)")

    def _accept(self, command: Command) -> None:
        command.status = "Pending"
        command.status_details = "Pending"
        command.completed_count = 0
        command.target_count = len(command.instance_ids)
        for invocation in command.invocations:
            invocation.update({
                "Status": "Pending", "StatusDetails": "Pending", "ResponseCode": -1,
                "StandardOutputContent": "", "StandardErrorContent": "",
                "ExecutionElapsedTime": "PT0S", "ExecutionEndDateTime": "",
            })
            self.plugins[(command.command_id, invocation["InstanceId"])] = {
                "Name": PLUGIN, "Status": "Pending", "StatusDetails": "Pending", "ResponseCode": -1, "Output": "",
            }
        self.sandbox.events.emit(
            "ssm", "command", f"command {command.command_id} ({command.document_name}) accepted for "
            f"{', '.join(command.instance_ids) or 'no instances'}",
            command_id=command.command_id, instance_ids=list(command.instance_ids),
        )
        for invocation in command.invocations:
            self._publish(command, invocation["InstanceId"], "Pending")
        if not command.instance_ids:
            command.status = command.status_details = "Success"
            return
        for invocation in command.invocations:
            self._threads.append(safe_thread(self._run, f"ssm-{command.command_id[:8]}", command, invocation))

    def _run(self, command: Command, invocation: dict[str, Any]) -> None:
        try:
            self._run_inner(command, invocation)
        except Exception as exc:  # noqa: BLE001
            log.exception("%s ssm command crashed", PREFIX)
            self._complete(command, invocation, "Failed", "Failed", 1, "", f"sandbox error: {exc}", time.monotonic())

    def _run_inner(self, command: Command, invocation: dict[str, Any]) -> None:
        instance_id = invocation["InstanceId"]
        params = command.parameters or {}
        commands = params.get("commands") or []
        try:
            timeout = int((params.get("executionTimeout") or [DEFAULT_EXECUTION_TIMEOUT])[0])
        except (TypeError, ValueError):
            timeout = DEFAULT_EXECUTION_TIMEOUT
        workdir = (params.get("workingDirectory") or [""])[0] or str(self.sandbox.repo_root)
        if self.sandbox.faults.get("ssm_timeout"):
            timeout = min(timeout, 1)
        time.sleep(0.2)
        if command.command_id in self.cancelled:
            return
        started = time.monotonic()
        start_iso = _now().isoformat()
        invocation.update({"Status": "InProgress", "StatusDetails": "InProgress", "ExecutionStartDateTime": start_iso})
        self.plugins[(command.command_id, instance_id)].update(
            {"Status": "InProgress", "StatusDetails": "InProgress", "ResponseStartDateTime": _now()})
        command.status = command.status_details = "InProgress"
        self._publish(command, instance_id, "InProgress")
        with tempfile.TemporaryDirectory(prefix="sim2real-ssm-") as tmp:
            script = Path(tmp) / "_script.sh"
            script.write_text("\n".join(commands) + "\n", encoding="utf-8")
            out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
            env = self.sandbox.process_env()
            if instance_id in self.instance_env:
                extra = self.instance_env[instance_id]()
                env.update(extra)
                if extra.get("SIM2REAL_SLURM_BIN"):
                    env["PATH"] = extra["SIM2REAL_SLURM_BIN"] + os.pathsep + env.get("PATH", "")
            if self.sandbox.faults.get("ssm_timeout"):
                script.write_text("sleep 30\n", encoding="utf-8")
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                process = subprocess.Popen(
                    ["sh", str(script)], cwd=workdir if Path(workdir).is_dir() else None, env=env,
                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                )
                self.processes[(command.command_id, instance_id)] = process
                self.sandbox.events.emit(
                    "ssm", "process", f"command {command.command_id} runs {len(commands)} line(s) with sh locally "
                    f"on behalf of {instance_id} (timeout {timeout}s)",
                    command_id=command.command_id, instance_id=instance_id,
                )
                try:
                    code = process.wait(timeout=timeout)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    _kill(process)
                    code = process.wait()
                    timed_out = True
                self.processes.pop((command.command_id, instance_id), None)
            stdout = out_path.read_text(encoding="utf-8", errors="replace")
            stderr = err_path.read_text(encoding="utf-8", errors="replace")
        if command.command_id in self.cancelled:
            status, details, code = "Cancelled", "Cancelled", -1
        elif timed_out:
            status, details, code = "TimedOut", "ExecutionTimedOut", -1
            stderr += f"\nfailed to run commands: command timed out after {timeout} seconds\n"
        elif code == 0:
            status, details = "Success", "Success"
        else:
            status, details = "Failed", "Failed"
        self._complete(command, invocation, status, details, code, stdout, stderr, started)

    def _complete(self, command: Command, invocation: dict[str, Any], status: str, details: str, code: int,
                  stdout: str, stderr: str, started: float) -> None:
        instance_id = invocation["InstanceId"]
        urls = self._upload(command, instance_id, stdout, stderr)
        elapsed = max(time.monotonic() - started, 0.0)
        invocation.update({
            "Status": status, "StatusDetails": details, "ResponseCode": code,
            "StandardOutputContent": stdout[:STDOUT_LIMIT], "StandardErrorContent": stderr[:STDERR_LIMIT],
            "StandardOutputUrl": urls[0], "StandardErrorUrl": urls[1],
            "ExecutionElapsedTime": f"PT{elapsed:.3f}S", "ExecutionEndDateTime": _now().isoformat(),
        })
        self.plugins[(command.command_id, instance_id)].update({
            "Status": status, "StatusDetails": details, "ResponseCode": code, "Output": stdout[:2500],
            "ResponseFinishDateTime": _now(), "StandardOutputUrl": urls[0], "StandardErrorUrl": urls[1],
            "OutputS3Region": command.output_s3_region or self.sandbox.region,
            "OutputS3BucketName": command.output_s3_bucket_name, "OutputS3KeyPrefix": command.output_s3_key_prefix,
        })
        statuses = [i["Status"] for i in command.invocations]
        done = [s for s in statuses if s not in ("Pending", "InProgress", "Delayed")]
        command.completed_count = len(done)
        command.error_count = len([s for s in done if s != "Success"])
        if len(done) == len(statuses):
            for final in ("Cancelled", "TimedOut", "Failed"):
                if final in statuses:
                    command.status = command.status_details = final
                    break
            else:
                command.status = command.status_details = "Success"
        self.sandbox.events.emit(
            "ssm", "command-done", f"command {command.command_id} on {instance_id}: {status} (exit {code}); "
            f"stdout {len(stdout)} chars" + (f" -> {urls[0]}" if urls[0] else ""),
            command_id=command.command_id, instance_id=instance_id, status=status,
        )
        self._publish(command, instance_id, status)

    def _publish(self, command: Command, instance_id: str, status: str) -> None:
        """The invocation's ``EC2 Command Invocation Status-change Notification``."""
        self.sandbox.aws_events.ssm_invocation(command.command_id, command.document_name, instance_id,
                                               getattr(command, "requested_date_time", None), status)

    def _upload(self, command: Command, instance_id: str, stdout: str, stderr: str) -> tuple[str, str]:
        bucket = command.output_s3_bucket_name
        if not bucket:
            return "", ""
        prefix = (command.output_s3_key_prefix or "").strip("/")
        base = "/".join(p for p in (prefix, command.command_id, instance_id, "awsrunShellScript", "0.awsrunShellScript") if p)
        s3 = self.sandbox.client("s3", internal=True)
        urls = []
        for name, text in (("stdout", stdout), ("stderr", stderr)):
            key = f"{base}/{name}"
            if text or name == "stdout":
                try:
                    s3.put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))
                except Exception as exc:  # noqa: BLE001 - AWS also runs the command when the upload fails
                    log.warning("%s could not write SSM output to s3://%s/%s: %s", PREFIX, bucket, key, exc)
                    urls.append("")
                    continue
                urls.append(f"https://s3.{self.sandbox.region}.amazonaws.com/{bucket}/{key}")
            else:
                urls.append("")
        return urls[0], urls[1]

    # -- other actions ---------------------------------------------------------------------
    def _backend(self) -> SimpleSystemManagerBackend:
        from moto.ssm.models import ssm_backends

        return ssm_backends[self.sandbox.account_id][self.sandbox.region]

    def _cancel(self, command_id: str, instance_ids: list[str]) -> None:
        command = self._backend().get_command_by_id(command_id)
        self.cancelled.add(command_id)
        for invocation in command.invocations:
            if instance_ids and invocation["InstanceId"] not in instance_ids:
                continue
            if invocation["Status"] in ("Pending", "InProgress", "Delayed"):
                invocation.update({"Status": "Cancelling", "StatusDetails": "Cancelling"})
                process = self.processes.get((command_id, invocation["InstanceId"]))
                if process is not None:
                    _kill(process)
                else:
                    invocation.update({"Status": "Cancelled", "StatusDetails": "Cancelled"})
                    self.plugins[(command_id, invocation["InstanceId"])].update({"Status": "Cancelled", "StatusDetails": "Cancelled"})
        if all(i["Status"] in ("Cancelled",) for i in command.invocations):
            command.status = command.status_details = "Cancelled"
        self.sandbox.events.emit("ssm", "cancel", f"command {command_id} cancelled", command_id=command_id)

    def _list_invocations(self, resp: SimpleSystemManagerResponse) -> dict[str, Any]:
        command_id = resp._get_param("CommandId")
        instance_id = resp._get_param("InstanceId")
        details = bool(resp._get_param("Details", False))
        backend = self._backend()
        commands = [backend.get_command_by_id(command_id)] if command_id else list(backend._commands)
        items = []
        for command in commands:
            for invocation in command.invocations:
                if instance_id and invocation["InstanceId"] != instance_id:
                    continue
                plugin = self.plugins.get((command.command_id, invocation["InstanceId"]), {})
                item = {
                    "CommandId": command.command_id, "InstanceId": invocation["InstanceId"],
                    "InstanceName": "", "Comment": command.comment, "DocumentName": command.document_name,
                    "DocumentVersion": "$DEFAULT", "RequestedDateTime": command.requested_date_time,
                    "Status": invocation["Status"], "StatusDetails": invocation["StatusDetails"],
                    "StandardOutputUrl": invocation.get("StandardOutputUrl", ""),
                    "StandardErrorUrl": invocation.get("StandardErrorUrl", ""),
                    "ServiceRole": command.service_role_arn,
                }
                if details:
                    item["CommandPlugins"] = [dict(plugin)] if plugin else []
                items.append(item)
        return {"CommandInvocations": items}

    def _instance_information(self, resp: SimpleSystemManagerResponse) -> dict[str, Any]:
        wanted: set[str] = set()
        ping_filter: set[str] = set()
        for f in resp._get_param("InstanceInformationFilterList") or []:
            if f.get("key") == "InstanceIds":
                wanted |= set(f.get("valueSet") or [])
            if f.get("key") == "PingStatus":
                ping_filter |= set(f.get("valueSet") or [])
        for f in resp._get_param("Filters") or []:
            if f.get("Key") == "InstanceIds":
                wanted |= set(f.get("Values") or [])
            if f.get("Key") == "PingStatus":
                ping_filter |= set(f.get("Values") or [])
        ec2 = ec2_backends[self.sandbox.account_id][self.sandbox.region]
        items = []
        for reservation in ec2.all_reservations():
            for instance in reservation.instances:
                if instance.id not in self.managed or (wanted and instance.id not in wanted):
                    continue
                state = instance.state
                ping = "Online" if state == "running" and not self.sandbox.faults.get("ssm_agent_offline") else "ConnectionLost"
                if ping_filter and ping not in ping_filter:
                    continue
                items.append({
                    "InstanceId": instance.id, "PingStatus": ping, "LastPingDateTime": _now(),
                    "AgentVersion": "3.3.0.0", "IsLatestVersion": True, "PlatformType": "Linux",
                    "PlatformName": "Ubuntu", "PlatformVersion": "22.04", "ResourceType": "EC2Instance",
                    "IPAddress": instance.private_ip or "127.0.0.1",
                    "ComputerName": self.managed[instance.id].get("ComputerName", instance.id),
                    "AssociationStatus": "Success",
                })
        return {"InstanceInformationList": items}


def _kill(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            process.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue
