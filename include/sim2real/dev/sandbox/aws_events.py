"""The AWS state-change events of the sandbox: what AWS publishes to EventBridge when a resource changes state.

Each responder calls :class:`AwsEventBus` on every state change; the bus sends the event with the real ``source``,
``detail-type`` and ``detail`` fields to moto's EventBridge (``PutEvents``, default bus). The rules the sandbox
provisions (the same patterns as infra/, :mod:`sim2real.orchestration.events.patterns`) deliver matching events
to the wait-event SQS queue: moto 5.2.5 evaluates the rule's pattern and sends the envelope to SQS targets, as
EventBridge does. (Real EventBridge refuses ``PutEvents`` with an ``aws.*`` source; moto does not check, which is
what lets the sandbox play the service's part.)

Shapes follow the AWS documentation pages named in :mod:`sim2real.orchestration.events.envelope`.

Fault switches (``sandbox.faults``), each ``True`` (every event), an int n (the next n events) or a list of
detail-types (only those):

* ``events_drop``: the event is not published (the wait's reconcile describe must end it);
* ``events_duplicate``: the event reaches the queue twice with the same id (EventBridge is at-least-once);
* ``events_delay``: seconds (number) every event is held back before it is published.

Delivery speed: moto 5.2.5 hands each matched event to each rule target through ``EventTemplateParser.parse``,
which parses the JSONPath of each of its default template's 8 input paths with ``jsonpath_ng.ext.parse``;
jsonpath-ng 1.8.0 builds a new PLY parser for every call and generates its LALR tables each time (it does not
write them), about 40 ms of CPU per path, 0.3 s per delivered event: the sandbox delivered about 3 events per
second on an idle core (1.3 under load), so 50 concurrent Batch jobs queued their events for minutes.
:meth:`AwsEventBus.install` makes that function parse each path once while the sandbox runs (the parsed
expressions are only read: the same answers, one table build per path).
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import itertools
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from sim2real.dev.sandbox._core import Patcher, log
from sim2real.orchestration.events import envelope as ev

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox


#: Entries one PutEvents call takes (Amazon EventBridge API Reference, PutEvents: 1 to 10 entries).
PUT_EVENTS_MAX_ENTRIES = 10
#: Parsed JSONPath expressions kept by :meth:`AwsEventBus.install` (moto's rule delivery uses 8 fixed paths).
JSONPATH_CACHE_SIZE = 256


def _iso(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


class AwsEventBus:
    """Publishes the sandbox's AWS events (thread-safe; one sender thread keeps order and applies delays)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._heap: list[tuple[float, int, dict[str, Any], bool]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        #: (detail-type, resource key ident, time.time() of the state change, EventBridge event id, time.time() when
        #: PutEvents returned) per published event.
        self.published: list[tuple[str, str, float, str, float]] = []

    # -- lifecycle ----------------------------------------------------------------------------------------
    def install(self, patcher: Patcher) -> None:
        """Make ``jsonpath_ng.ext.parse`` (what moto's EventBridge calls to build each delivered event) return
        one parsed expression per ``(path, debug)`` until ``patcher`` undoes it (see the module doc: without it
        every delivered event costs 8 parser builds, about 0.3 s of CPU)."""
        import jsonpath_ng.ext

        patcher.setattr(jsonpath_ng.ext, "parse", functools.lru_cache(maxsize=JSONPATH_CACHE_SIZE)(jsonpath_ng.ext.parse))

    def start(self) -> None:
        self._stopped = False
        self._thread = threading.Thread(target=self._send_loop, name="sandbox-aws-events", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # -- faults ---------------------------------------------------------------------------------------------
    def _take(self, name: str, detail_type: str) -> bool:
        value = self.sandbox.faults.get(name)
        if not value:
            return False
        if isinstance(value, (list, tuple, set)):
            return detail_type in value
        if value is True:
            return True
        if isinstance(value, int):
            self.sandbox.faults[name] = value - 1
            return True
        return False

    # -- publishing -----------------------------------------------------------------------------------------
    def publish(self, detail_type: str, resources: list[str], detail: dict[str, Any]) -> None:
        """Publish one event now (or after the ``events_delay`` fault), unless the ``events_drop`` fault takes it."""
        if self._stopped or self._thread is None:
            return
        key = ev.EventEnvelope.parse({"id": "-", "source": ev.SOURCES[detail_type], "detail-type": detail_type,
                                      "detail": detail, "resources": resources}).resource_key()
        if self._take("events_drop", detail_type):
            self.sandbox.events.emit("events", "dropped", f"{detail_type} for {key.ident} dropped (fault events_drop)",
                                     detail_type=detail_type, key=key.ident)
            return
        delay = float(self.sandbox.faults.get("events_delay") or 0)
        duplicate = self._take("events_duplicate", detail_type)
        entry = {"Source": ev.SOURCES[detail_type], "DetailType": detail_type, "Resources": list(resources),
                 "Detail": json.dumps(detail, default=str), "Time": dt.datetime.now(dt.timezone.utc),
                 "_key": key.ident, "_changed_at": time.time()}
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), entry, duplicate))
            self._cond.notify_all()

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._heap else max(self._heap[0][0] - time.monotonic(), 0.0))
                if self._stopped:
                    return
                due = []   # every event that is due, in order, up to PutEvents' 10 entries per call
                while self._heap and self._heap[0][0] <= time.monotonic() and len(due) < PUT_EVENTS_MAX_ENTRIES:
                    _, _, entry, duplicate = heapq.heappop(self._heap)
                    due.append((entry, duplicate))
            try:
                self._send(due)
            except Exception:  # noqa: BLE001 - a lost event is what the reconcile poll is for; never crash
                log.exception("sandbox: publishing %s failed", [e.get("DetailType") for e, _ in due])

    def _send(self, due: list[tuple[dict[str, Any], bool]]) -> None:
        """One PutEvents call for ``due`` (up to 10 entries, in order)."""
        meta = [(entry.pop("_key"), entry.pop("_changed_at")) for entry, _ in due]
        reply = self.sandbox.client("events", internal=True).put_events(Entries=[entry for entry, _ in due])
        returned = time.time()
        for (entry, duplicate), (key, changed_at), result in zip(due, meta, reply["Entries"], strict=True):
            self._sent(entry, duplicate, key, changed_at, result.get("EventId", ""), returned)

    def _sent(self, entry: dict[str, Any], duplicate: bool, key: str, changed_at: float, event_id: str,
              returned: float) -> None:
        self.published.append((entry["DetailType"], key, changed_at, event_id, returned))
        self.sandbox.events.emit("events", "published", f"{entry['DetailType']} for {key} -> EventBridge",
                                 detail_type=entry["DetailType"], key=key, event_id=event_id)
        if duplicate:
            queue_url = (self.sandbox.config.get("events") or {}).get("queue_url")
            if queue_url:
                body = {"version": "0", "id": event_id, "detail-type": entry["DetailType"],
                        "source": entry["Source"], "account": self.sandbox.account_id, "time": _iso(),
                        "region": self.sandbox.region, "resources": entry["Resources"],
                        "detail": json.loads(entry["Detail"])}
                self.sandbox.client("sqs", internal=True).send_message(QueueUrl=queue_url, MessageBody=json.dumps(body))
                self.sandbox.events.emit("events", "duplicated", f"{entry['DetailType']} for {key} delivered twice "
                                         "(fault events_duplicate)", detail_type=entry["DetailType"], key=key)

    # -- the services' events -----------------------------------------------------------------------------
    def batch_job(self, job_description: dict[str, Any]) -> None:
        """``Batch Job State Change``: detail is the job as DescribeJobs returns it (AWS Batch User Guide,
        "Job state change events"); resources: the job ARN."""
        self.publish(ev.BATCH_JOB, [job_description.get("jobArn", "")], job_description)

    def codebuild_build(self, build: dict[str, Any]) -> None:
        """``CodeBuild Build State Change`` from a BatchGetBuilds build (CodeBuild User Guide, "Build notifications
        input format reference": kebab-case keys, phases under ``additional-information``)."""
        phases = [{"phase-context": [f"{c.get('statusCode')}: {c.get('message')}" for c in p.get("contexts") or []],
                   "start-time": p.get("startTime"), "end-time": p.get("endTime"),
                   "duration-in-seconds": p.get("durationInSeconds"), "phase-type": p.get("phaseType"),
                   "phase-status": p.get("phaseStatus")} for p in build.get("phases") or []]
        logs = {_kebab(k): v for k, v in (build.get("logs") or {}).items() if k in ("groupName", "streamName",
                                                                                    "deepLink")}
        info = {"build-complete": bool(build.get("buildComplete")), "initiator": build.get("initiator", "sandbox"),
                "build-start-time": str(build.get("startTime", "")), "source-version": build.get("sourceVersion"),
                "logs": logs, "phases": phases, "timeout-in-minutes": build.get("timeoutInMinutes", 60)}
        detail = {"build-status": build["buildStatus"], "project-name": build["projectName"],
                  "build-id": build.get("arn") or build["id"], "additional-information": info,
                  "current-phase": build.get("currentPhase", ""), "current-phase-context": "[]", "version": "1"}
        self.publish(ev.CODEBUILD_BUILD, [build.get("arn") or build["id"]], detail)

    def ssm_invocation(self, command_id: str, document_name: str, instance_id: str, requested: Any,
                       status: str) -> None:
        """``EC2 Command Invocation Status-change Notification`` (Systems Manager User Guide, "Amazon EventBridge
        event examples for Systems Manager"); resources: the instance ARN."""
        arn = f"arn:aws:ec2:{self.sandbox.region}:{self.sandbox.account_id}:instance/{instance_id}"
        requested_iso = requested.isoformat() if hasattr(requested, "isoformat") else str(requested or _iso())
        self.publish(ev.SSM_INVOCATION, [arn], {"command-id": command_id, "document-name": document_name,
                                                "instance-id": instance_id, "requested-date-time": requested_iso,
                                                "status": status})

    def pipeline_execution(self, execution_arn: str, status: str, previous: str | None, display_name: str | None,
                           start_time: Any = None) -> None:
        """``SageMaker Model Building Pipeline Execution Status Change`` (SageMaker Developer Guide, "Events that
        Amazon SageMaker AI sends to Amazon EventBridge"); resources: the pipeline ARN and the execution ARN."""
        pipeline_arn = execution_arn.split("/execution/", 1)[0]
        detail = {"currentPipelineExecutionStatus": status, "previousPipelineExecutionStatus": previous or "",
                  "executionStartTime": str(start_time or _iso()), "pipelineExecutionDisplayName": display_name or "",
                  "pipelineExecutionArn": execution_arn, "pipelineArn": pipeline_arn}
        if status in ("Succeeded", "Failed", "Stopped"):
            detail["executionEndTime"] = _iso()
        self.publish(ev.PIPELINE_EXECUTION, [pipeline_arn, execution_arn], detail)

    def model_package(self, description: dict[str, Any]) -> None:
        """``SageMaker Model Package State Change`` (SageMaker Developer Guide, "Events that Amazon SageMaker AI sends
        to Amazon EventBridge", model package state change): source ``aws.sagemaker``, detail is the
        DescribeModelPackage shape (``ModelPackageArn``, ``ModelPackageGroupName``, ``ModelApprovalStatus``...),
        resources: the package ARN. The provisioned rule matches ``detail.ModelPackageGroupName``."""
        self.publish(ev.MODEL_PACKAGE, [description.get("ModelPackageArn", "")], description)

    def greengrass_device(self, deployment_id: str, thing: str, status: str, reason: str = "",
                          status_details: dict[str, Any] | None = None) -> None:
        """``Greengrass V2 Effective Deployment Status Change`` of one core device (Greengrass V2 Developer Guide,
        "Get deployment status notifications"); resources: the core device ARN."""
        arn = f"arn:aws:greengrass:{self.sandbox.region}:{self.sandbox.account_id}:coreDevices:{thing}"
        detail = {"deploymentId": deployment_id, "coreDeviceExecutionStatus": status, "coreDeviceThingName": thing,
                  "reason": reason, "statusDetails": status_details or {"errorStack": [], "errorTypes": []}}
        self.publish(ev.GREENGRASS_DEPLOYMENT, [arn], detail)


#: Name of the wait-event queue (and ``<name>-dlq``), as infra/ names it.
QUEUE_NAME = "sim2real-wait-events"


def provision_wait_events(sandbox: Sandbox, config: dict[str, Any], *, max_receive_count: int = 10) -> dict[str, Any]:
    """Create the wait-event queue, its dead-letter queue and the EventBridge rules (infra/'s patterns) in moto.

    :param config: the environment config being provisioned (names the job queue, project, pipeline, ...).
    :return: the config's ``events`` section (mode ``events``, the queue URL).
    """
    from sim2real.orchestration.events.patterns import ProjectResources, rule_patterns

    region, account = sandbox.region, sandbox.account_id
    sqs = sandbox.client("sqs", internal=True)
    events = sandbox.client("events", internal=True)
    dlq_url = sqs.create_queue(QueueName=f"{QUEUE_NAME}-dlq", Attributes={
        "SqsManagedSseEnabled": "true", "MessageRetentionPeriod": str(14 * 86400)})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(QueueName=QUEUE_NAME, Attributes={
        "SqsManagedSseEnabled": "true", "VisibilityTimeout": "30", "MessageRetentionPeriod": str(4 * 86400),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sm = config["sagemaker"]
    resources = ProjectResources(
        job_queue_arn=f"arn:aws:batch:{region}:{account}:job-queue/{config['batch']['job_queue']}",
        codebuild_project=config["image_build"]["codebuild_project"],
        ssm_documents=("AWS-RunShellScript", "sim2real-evaluate"),
        pipeline_arn=f"arn:aws:sagemaker:{region}:{account}:pipeline/{sm['pipeline_name']}",
        model_package_group=sm["model_package_group"],
        hyperpod_cluster=(config.get("hyperpod") or {}).get("cluster_name", ""),
    )
    for rule_id, pattern in rule_patterns(resources).items():
        name = f"{QUEUE_NAME}-{rule_id}"
        events.put_rule(Name=name, EventPattern=json.dumps(pattern), State="ENABLED")
        events.put_targets(Rule=name, Targets=[{"Id": "WaitEventQueue", "Arn": queue_arn}])
    sandbox.events.emit("events", "provisioned", f"wait-event queue {queue_url} (dead-letter queue after "
                        f"{max_receive_count} receives) behind {len(rule_patterns(resources))} EventBridge rules",
                        queue_url=queue_url)
    sandbox.wait_events_dead_letter_queue_url = dlq_url
    # the waits consume the queue (docs/architecture.md, Event-driven waits); 10 min reconcile describe as in infra/
    return {"mode": "events", "queue_url": queue_url, "reconcile_interval_seconds": 600}
