"""SageMaker responder: pipeline executions that play their steps, model registry fixes, HyperPod UpdateCluster.

moto 5.2.5 marks a pipeline execution ``Succeeded`` at creation, lacks
ListPipelineExecutionSteps / StopPipelineExecution / UpdateCluster, and wipes a model package's
``CustomerMetadataProperties`` (and approval status) when UpdateModelPackage omits them. Here:

* StartPipelineExecution → ``Executing``; a thread plays the GR00T pipeline's steps
  (TransformDataset → GR00TFinetune → SmokeEval → SmokeGate → RegisterModel; the step names come
  from the pipeline definition when it has ``Steps``). The GR00T fine-tune cannot run here, so
  RegisterModel writes a small real ``s3://<bucket>/runs/<run_key>/vla/model.tar.gz`` and registers
  a model package (PendingManualApproval, CustomerMetadataProperties ``sim2real:run-key`` and
  ``sim2real:pipeline-execution-arn``) in the group named by the definition's RegisterModel step,
  else the sandbox config's group; then ``Succeeded`` (or the ``pipeline_status`` fault's status).
* CreateModelPackage and UpdateModelPackage (any caller) publish the package's ``SageMaker Model Package State
  Change`` (:meth:`~sim2real.dev.sandbox.aws_events.AwsEventBus.model_package`).
* TransformDataset, when ``FieldDatasetManifestS3Uri`` is set, reads that manifest from the sandbox's S3, checks it
  and every data file's sha256, and fails (step ``FailureReason``, execution ``Failed``) when they are not usable,
  as the real processing job would.
* StopPipelineExecution → ``Stopping`` → ``Stopped``.
* UpdateCluster replaces the instance groups like AWS: every group in the request gets its count,
  groups left out are deleted; nodes follow (``Pending`` → ``Running``), status Updating → InService.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import tarfile
import threading
import time
from typing import TYPE_CHECKING, Any

from moto.core.responses import ActionResult
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import Cluster, ClusterNode, SageMakerModelBackend, sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse
from moto.sagemaker.utils import get_pipeline_execution_from_arn

from sim2real.contract.storage import split_s3
from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.pipelines.groot import FIELD_MANIFEST_PARAMETER
from sim2real.dev.sandbox._core import PREFIX, Patcher, active, log, safe_thread

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

DEFAULT_STEPS = [
    ("TransformDataset", "Processing"),
    ("GR00TFinetune", "Training"),
    ("SmokeEval", "Processing"),
    ("SmokeGate", "Condition"),
    ("RegisterModel", "RegisterModel"),
]
EXECUTION_ARN_KEY = "sim2real:pipeline-execution-arn"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)



def _flatten_steps(steps: list[Any]) -> list[dict[str, Any]]:
    """Steps in execution order: a Condition step is followed by its IfSteps (the sandbox's
    conditions evaluate True, as a passing smoke check would), as SageMaker runs them."""
    out: list[dict[str, Any]] = []
    for step in steps or []:
        if not isinstance(step, dict) or not step.get("Name"):
            continue
        out.append(step)
        if step.get("Type") == "Condition":
            out.extend(_flatten_steps((step.get("Arguments") or {}).get("IfSteps") or []))
    return out

class SageMakerResponder:
    def __init__(self, sandbox: Sandbox, step_seconds: float) -> None:
        self.sandbox = sandbox
        self.step_seconds = step_seconds
        self.steps: dict[str, list[dict[str, Any]]] = {}
        self.stop_events: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    def _backend(self) -> SageMakerModelBackend:
        return sagemaker_backends[self.sandbox.account_id][self.sandbox.region]

    # -- patches ---------------------------------------------------------------------------
    def install(self, patcher: Patcher) -> None:
        original_start = SageMakerResponse.start_pipeline_execution
        original_describe_exec = SageMakerModelBackend.describe_pipeline_execution

        def start_pipeline_execution(resp: SageMakerResponse) -> ActionResult:
            result = original_start(resp)
            active().sagemaker._accept(result.result["PipelineExecutionArn"])  # type: ignore[index]
            return result

        def describe_pipeline_execution(backend: SageMakerModelBackend, arn: str) -> dict[str, Any]:
            result = original_describe_exec(backend, arn)
            execution = get_pipeline_execution_from_arn(backend.pipelines, arn)
            result["FailureReason"] = execution.pipeline_execution_failure_reason or ""
            return result

        def list_pipeline_execution_steps(resp: SageMakerResponse) -> ActionResult:
            return ActionResult(active().sagemaker._list_steps(resp))

        def stop_pipeline_execution(resp: SageMakerResponse) -> ActionResult:
            return ActionResult(active().sagemaker._stop(resp._get_param("PipelineExecutionArn")))

        def update_cluster(resp: SageMakerResponse) -> ActionResult:
            return ActionResult(active().sagemaker._update_cluster(resp))

        def update_model_package(
            backend: SageMakerModelBackend, model_package_arn: str, model_approval_status: str | None,
            approval_description: str | None, customer_metadata_properties: dict[str, str] | None,
            customer_metadata_properties_to_remove: list[str], additional_inference_specifications_to_add: list[Any] | None,
        ) -> str:
            name = backend.model_package_name_mapping.get(model_package_arn, model_package_arn)
            package = backend.model_packages.get(name)
            if package is None:
                raise ValidationError(f"Model package {model_package_arn} not found")
            if model_approval_status is not None:
                package.set_model_approval_status(model_approval_status)
            if approval_description is not None:
                package.approval_description = approval_description
            merged = dict(package.customer_metadata_properties or {})
            merged.update(customer_metadata_properties or {})
            for key in customer_metadata_properties_to_remove or []:
                merged.pop(key, None)
            package.customer_metadata_properties = merged
            package.add_additional_inference_specifications(additional_inference_specifications_to_add)
            package.modifications_done()
            active().events.emit(
                "sagemaker", "model-package-update",
                f"model package {package.arn} -> {package.model_approval_status}"
                + (f" ({approval_description})" if approval_description else ""),
                arn=package.arn, status=package.model_approval_status,
            )
            active().sagemaker._publish_package(package)
            return package.arn

        original_create_package = SageMakerModelBackend.create_model_package

        def create_model_package(backend: SageMakerModelBackend, *args: Any, **kwargs: Any) -> str:
            arn = original_create_package(backend, *args, **kwargs)
            package = backend.model_packages.get(backend.model_package_name_mapping.get(arn, arn)) or \
                backend.model_packages.get(arn)
            if package is not None:
                active().sagemaker._publish_package(package)
            return arn

        def valid_cluster_node_instance_types(self: Cluster, instance_type: str) -> None:
            if not str(instance_type).startswith("ml."):
                raise ValidationError(message=f"Invalid instance type {instance_type}")

        patcher.setattr(SageMakerResponse, "start_pipeline_execution", start_pipeline_execution)
        patcher.setattr(SageMakerModelBackend, "describe_pipeline_execution", describe_pipeline_execution)
        patcher.setattr(SageMakerResponse, "list_pipeline_execution_steps", list_pipeline_execution_steps)
        patcher.setattr(SageMakerResponse, "stop_pipeline_execution", stop_pipeline_execution)
        patcher.setattr(SageMakerResponse, "update_cluster", update_cluster)
        patcher.setattr(SageMakerModelBackend, "update_model_package", update_model_package)
        patcher.setattr(SageMakerModelBackend, "create_model_package", create_model_package)
        # moto's create_cluster only knows a 2023 list of types (no ml.g6*); AWS accepts any ml.* type.
        patcher.setattr(Cluster, "valid_cluster_node_instance_types", valid_cluster_node_instance_types)

    def shutdown(self) -> None:
        for event in self.stop_events.values():
            event.set()
        for thread in self._threads:
            thread.join(timeout=10)

    # -- pipeline executions ---------------------------------------------------------------
    def _accept(self, arn: str) -> None:
        execution = get_pipeline_execution_from_arn(self._backend().pipelines, arn)
        execution.pipeline_execution_status = "Executing"
        self.steps[arn] = []
        self.stop_events[arn] = threading.Event()
        self.sandbox.events.emit(
            "sagemaker", "pipeline-status",
            f"pipeline execution {arn} ({execution.pipeline_execution_display_name}) Executing; "
            "the GR00T steps are played, not run",
            arn=arn, status="Executing",
        )
        self.sandbox.aws_events.pipeline_execution(arn, "Executing", None, execution.pipeline_execution_display_name,
                                                   getattr(execution, "start_time", None))
        self._threads.append(safe_thread(self._play, f"pipeline-{arn[-8:]}", arn))

    def _set_status(self, arn: str, status: str, reason: str | None = None) -> None:
        execution = get_pipeline_execution_from_arn(self._backend().pipelines, arn)
        previous = execution.pipeline_execution_status
        execution.pipeline_execution_status = status
        execution.last_modified_time = _now()
        if reason:
            execution.pipeline_execution_failure_reason = reason
        self.sandbox.events.emit(
            "sagemaker", "pipeline-status", f"pipeline execution {arn} {status}" + (f": {reason}" if reason else ""),
            arn=arn, status=status,
        )
        self.sandbox.aws_events.pipeline_execution(arn, status, previous, execution.pipeline_execution_display_name,
                                                   getattr(execution, "start_time", None))

    def _definition(self, arn: str) -> dict[str, Any]:
        execution = get_pipeline_execution_from_arn(self._backend().pipelines, arn)
        try:
            definition = json.loads(execution.pipeline_definition_for_execution or "{}")
            return definition if isinstance(definition, dict) else {}
        except (TypeError, ValueError):
            return {}

    def _parameters(self, arn: str) -> dict[str, str]:
        execution = get_pipeline_execution_from_arn(self._backend().pipelines, arn)
        params = {p.get("Name"): p.get("DefaultValue") for p in self._definition(arn).get("Parameters", []) if isinstance(p, dict)}
        params.update({p["Name"]: p["Value"] for p in execution.pipeline_parameters or []})
        return {k: v for k, v in params.items() if k}

    def _resolve(self, value: Any, params: dict[str, str]) -> Any:
        """A definition value with its pipeline parameters filled in: ``{"Get": "Parameters.X"}`` and
        ``{"Std:Join": {"On", "Values"}}`` (the SageMaker pipeline definition JSON schema's functions); other
        references (to step properties) are left as they are."""
        if isinstance(value, dict) and isinstance(value.get("Get"), str) and value["Get"].startswith("Parameters."):
            return params.get(value["Get"].split(".", 1)[1])
        if isinstance(value, dict) and isinstance(value.get("Std:Join"), dict):
            join = value["Std:Join"]
            parts = [self._resolve(v, params) for v in join.get("Values") or []]
            if all(isinstance(part, (str, int, float)) for part in parts):
                return str(join.get("On", "")).join(str(part) for part in parts)
        return value

    def _write_smoke_report(self, step_def: dict[str, Any], params: dict[str, str]) -> None:
        """What the SmokeEval processing job uploads at its end: ``smoke.json`` under the step's ``smoke``
        output (``ProcessingOutputConfig.Outputs[].S3Output.S3Uri``, resolved), saying the sandbox played the
        step (no model was loaded; the SmokeGate condition then evaluates True, as for a passing check)."""
        outputs = ((step_def.get("Arguments") or {}).get("ProcessingOutputConfig") or {}).get("Outputs") or []
        for output in outputs:
            uri = self._resolve((output.get("S3Output") or {}).get("S3Uri"), params)
            if output.get("OutputName") != "smoke" or not isinstance(uri, str) or not uri.startswith("s3://"):
                continue
            bucket, prefix = split_s3(uri)
            report = {"passed": True, "reason": "sandbox: the SmokeEval step was played, no model was loaded",
                      "emulated": True}
            self.sandbox.client("s3", internal=True).put_object(
                Bucket=bucket, Key=f"{prefix.rstrip('/')}/smoke.json", Body=json.dumps(report).encode(),
                ContentType="application/json")

    def _field_dataset_failure(self, params: dict[str, str]) -> str | None:
        """The FailureReason TransformDataset's processing job would end with for the field dataset named by the
        ``FieldDatasetManifestS3Uri`` parameter, or None (none named, or it is usable): the manifest read from the
        sandbox's S3 (GetObject) and checked (:func:`sim2real.contract.field.dataset_errors`), then every data
        file's sha256 against the manifest (GetObject). The columns are not checked here (no dataset is read)."""
        import hashlib

        from botocore.exceptions import ClientError

        from sim2real.contract import field

        uri = params.get(FIELD_MANIFEST_PARAMETER) or ""
        if not uri:
            return None
        s3 = self.sandbox.client("s3", internal=True)
        try:
            bucket, key = split_s3(uri)
            document = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            problems = field.dataset_errors(document)
        except (ClientError, ValueError) as exc:
            problems = [f"field manifest {uri} cannot be read: {exc}"]
        for entry in [] if problems else document["episodes"]:
            try:
                digest = hashlib.sha256(s3.get_object(Bucket=document["bucket"], Key=entry["data_key"])[
                    "Body"].read()).hexdigest()
            except ClientError as exc:
                problems.append(f"{entry['data_key']}: {exc}")
                continue
            if digest != entry["sha256"]:
                problems.append(f"{entry['data_key']}: sha256 {digest} is not the manifest's {entry['sha256']}")
        if not problems:
            return None
        return ("ClientError: AlgorithmError: TransformDataset: the field dataset is not usable: "
                + "; ".join(problems) + " (exit code 2)")

    def _play(self, arn: str) -> None:  # noqa: D401 - thread body
        try:
            self._play_inner(arn)
        except Exception as exc:  # noqa: BLE001
            log.exception("%s pipeline emulation crashed", PREFIX)
            self._set_status(arn, "Failed", f"sandbox error: {exc}")

    def _play_inner(self, arn: str) -> None:
        stop = self.stop_events[arn]
        definition = self._definition(arn)
        params = self._parameters(arn)
        flat = _flatten_steps(definition.get("Steps", []))
        steps = [(s.get("Name"), s.get("Type", "")) for s in flat]
        steps = steps or list(DEFAULT_STEPS)
        final = self.sandbox.faults.get("pipeline_status") or "Succeeded"
        fail_step = self.sandbox.faults.get("pipeline_fail_step") or (
            "GR00TFinetune" if final in ("Failed", "CompletedWithFailures") else None)
        if stop.wait(self.step_seconds):
            return self._stopped(arn)
        for name, step_type in steps:
            step = {"StepName": name, "StepDisplayName": name, "StepStatus": "Executing", "StartTime": _now(),
                    "AttemptCount": 1, "Metadata": {}}
            self.steps[arn].append(step)
            if stop.wait(self.step_seconds):
                step.update({"StepStatus": "Stopped", "EndTime": _now()})
                return self._stopped(arn)
            reason = self._field_dataset_failure(params) if name == "TransformDataset" else None
            if reason or name == fail_step:
                reason = reason or f"sandbox fault: step {name} failed (ClientError: AlgorithmError: emulated failure)"
                step.update({"StepStatus": "Failed", "EndTime": _now(), "FailureReason": reason})
                self.sandbox.events.emit("sagemaker", "pipeline-step", f"{arn} step {name} Failed", arn=arn, step=name)
                return self._set_status(arn, "Failed" if final != "CompletedWithFailures" else final, reason)
            if step_type == "RegisterModel" or name == "RegisterModel":
                step_def = next((s for s in flat if s.get("Name") == name), {})
                package_arn = self._register(arn, step_def, params)
                step["Metadata"] = {"RegisterModel": {"Arn": package_arn}}
            elif name == "SmokeEval" and step_type == "Processing":
                self._write_smoke_report(next((s for s in flat if s.get("Name") == name), {}), params)
            elif step_type == "Condition":
                step["Metadata"] = {"Condition": {"Outcome": "True"}}
            step.update({"StepStatus": "Succeeded", "EndTime": _now()})
            self.sandbox.events.emit("sagemaker", "pipeline-step", f"{arn} step {name} Succeeded (played)", arn=arn, step=name)
        self._set_status(arn, final if final != "Failed" else "Failed",
                         None if final == "Succeeded" else f"sandbox fault: pipeline_status={final}")

    def _stopped(self, arn: str) -> None:
        time.sleep(min(self.step_seconds, 0.5))
        self._set_status(arn, "Stopped")

    def _register(self, arn: str, step_def: dict[str, Any], params: dict[str, str]) -> str:
        execution = get_pipeline_execution_from_arn(self._backend().pipelines, arn)
        args = step_def.get("Arguments") or {}
        group = self._resolve(args.get("ModelPackageGroupName"), params) or (
            self.sandbox.config.get("sagemaker", {}).get("model_package_group"))
        if not group:
            raise RuntimeError("no model package group: the RegisterModel step names none and the sandbox is not provisioned")
        run_key = params.get("RunKey") or execution.pipeline_execution_display_name or arn.rsplit("/", 1)[-1]
        bucket = params.get("ArtifactsBucket") or self.sandbox.config.get("artifacts_bucket")
        key = f"runs/{run_key}/vla/model.tar.gz"
        s3 = self.sandbox.client("s3", internal=True)
        s3.put_object(Bucket=bucket, Key=key, Body=_model_tarball(run_key, arn))
        model_url = f"s3://{bucket}/{key}"
        image = params.get("InferenceImage") or (
            f"{self.sandbox.account_id}.dkr.ecr.{self.sandbox.region}.amazonaws.com/sim2real-groot:sandbox")
        sm = self.sandbox.client("sagemaker", internal=True)
        response = sm.create_model_package(
            ModelPackageGroupName=group,
            ModelPackageDescription=f"GR00T fine-tune for run {run_key} (registered by the sandbox's emulated pipeline)",
            InferenceSpecification={
                "Containers": [{"Image": image, "ModelDataUrl": model_url}],
                "SupportedContentTypes": ["application/json"],
                "SupportedResponseMIMETypes": ["application/json"],
            },
            ModelApprovalStatus="PendingManualApproval",
            CustomerMetadataProperties={RUN_KEY_TAG: run_key, EXECUTION_ARN_KEY: arn},
        )
        package_arn = response["ModelPackageArn"]
        self.sandbox.events.emit(
            "sagemaker", "model-package", f"registered {package_arn} (PendingManualApproval) for run {run_key}, "
            f"model data {model_url}",
            arn=package_arn, run_key=run_key, group=group, model_data_url=model_url,
        )
        return package_arn  # CreateModelPackage published the package's state-change event

    def _publish_package(self, package: Any) -> None:
        """The package's ``SageMaker Model Package State Change`` (detail: its DescribeModelPackage response), on
        every CreateModelPackage and UpdateModelPackage, whoever calls them."""
        self.sandbox.aws_events.model_package(package.gen_response_object())

    def _list_steps(self, resp: SageMakerResponse) -> dict[str, Any]:
        arn = resp._get_param("PipelineExecutionArn")
        get_pipeline_execution_from_arn(self._backend().pipelines, arn)  # ValidationError when unknown
        steps = [dict(s) for s in self.steps.get(arn, [])]
        if resp._get_param("SortOrder", "Descending") == "Descending":
            steps.reverse()
        return {"PipelineExecutionSteps": steps}

    def _stop(self, arn: str) -> dict[str, Any]:
        execution = get_pipeline_execution_from_arn(self._backend().pipelines, arn)
        if execution.pipeline_execution_status in ("Executing",) and arn in self.stop_events:
            self._set_status(arn, "Stopping")
            self.stop_events[arn].set()
        return {"PipelineExecutionArn": arn}

    # -- HyperPod --------------------------------------------------------------------------
    def _update_cluster(self, resp: SageMakerResponse) -> dict[str, Any]:
        backend = self._backend()
        name = resp._get_param("ClusterName")
        if name.startswith("arn:"):
            name = name.rsplit("/", 1)[-1]
        cluster = backend.clusters.get(name)
        if cluster is None:
            raise ValidationError(message=f"Could not find cluster '{name}'.")
        requested = resp._get_param("InstanceGroups") or []
        to_delete = set(resp._get_param("InstanceGroupsToDelete") or [])
        existing = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
        new_groups = []
        for spec in requested:
            group = dict(existing.get(spec["InstanceGroupName"], {}))
            group.update({k: v for k, v in spec.items() if k != "InstanceCount"})
            group.setdefault("CurrentCount", 0)
            group["TargetCount"] = int(spec["InstanceCount"])
            group.setdefault("ThreadsPerCore", 1)
            new_groups.append(group)
        kept = {g["InstanceGroupName"] for g in new_groups} - to_delete
        deleted = sorted(set(existing) - kept)
        cluster.instance_groups = [g for g in new_groups if g["InstanceGroupName"] in kept]
        cluster.status = "Updating"
        self.sandbox.events.emit(
            "sagemaker", "cluster-update",
            f"UpdateCluster {name}: " + ", ".join(f"{g['InstanceGroupName']}={g['TargetCount']}" for g in cluster.instance_groups)
            + (f"; deleted groups (left out of the request): {', '.join(deleted)}" if deleted else ""),
            cluster=name, deleted=deleted,
        )
        self._threads.append(safe_thread(self._converge, f"cluster-{name}", cluster, deleted))
        return {"ClusterArn": cluster.arn}

    def _converge(self, cluster: Cluster, deleted: list[str]) -> None:
        time.sleep(self.step_seconds)
        for node_id, node in list(cluster.nodes.items()):
            if node.instance_group_name in deleted:
                del cluster.nodes[node_id]
        pending: list[ClusterNode] = []
        for group in cluster.instance_groups:
            name = group["InstanceGroupName"]
            nodes = sorted((n for n in cluster.nodes.values() if n.instance_group_name == name), key=lambda n: n.instance_id)
            target = group["TargetCount"]
            for node in nodes[target:]:
                del cluster.nodes[node.instance_id]
            index = 0
            while len([n for n in cluster.nodes.values() if n.instance_group_name == name]) < target:
                node_id = f"{name}-{index}"
                index += 1
                if node_id in cluster.nodes:
                    continue
                node = ClusterNode(
                    region_name=cluster.region_name, account_id=cluster.account_id, cluster_name=cluster.cluster_name,
                    instance_group_name=name, instance_type=group.get("InstanceType"),
                    life_cycle_config=group.get("LifeCycleConfig"), execution_role=group.get("ExecutionRole"),
                    node_id=node_id, threads_per_core=group.get("ThreadsPerCore"),
                )
                node.status = "Pending"
                cluster.nodes[node_id] = node
                pending.append(node)
            group["CurrentCount"] = min(group.get("CurrentCount", 0), target)
        time.sleep(self.step_seconds)
        for node in pending:
            node.status = "Running"
        for group in cluster.instance_groups:
            group["CurrentCount"] = group["TargetCount"]
        cluster.status = "InService"
        self.sandbox.events.emit(
            "sagemaker", "cluster-status", f"cluster {cluster.cluster_name} InService: "
            + ", ".join(f"{g['InstanceGroupName']}={g['CurrentCount']}" for g in cluster.instance_groups),
            cluster=cluster.cluster_name,
        )


def _model_tarball(run_key: str, arn: str) -> bytes:
    buffer = io.BytesIO()
    payload = json.dumps({"run_key": run_key, "pipeline_execution_arn": arn,
                          "note": "placeholder written by the sim2real sandbox; the GR00T fine-tune is emulated"}).encode()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("SANDBOX_MODEL.json")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()
