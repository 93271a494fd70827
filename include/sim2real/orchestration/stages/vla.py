"""GR00T fine-tune and approval (group ``vla``): SageMaker Pipelines, then the Model Registry approval."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Asset

from sim2real.contract import groot
from sim2real.contract import task_ids as ids
from sim2real.orchestration import assets
from sim2real.orchestration.config import IMAGES_BY_VERSION, groot_images, missing_groot_images
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.params import SECTION_VLA, VLA_INSTANCE_GPUS, _range
from sim2real.orchestration.pipelines.groot import pipeline_definition_json
from sim2real.orchestration.review import approval_body
from sim2real.orchestration.stages import vla_field
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.rounds import lineage_entry

DOC = """\
**Fine-tune GR00T and approve the release.** First hands the pipeline the field dataset version the fine-tune includes
(form field `field_dataset_version`; a run started by a new version uses it), as `check_resources` resolved it and
checked its manifest in S3 (`HeadObject`, `GetObject`) before any spend: none published, no manifest or an invalid one
refuses the run there; a newer version published since does not change it. Calls SageMaker
`DescribePipeline`, `CreatePipeline` / `UpdatePipeline` (only when the definition changed), `ListPipelineExecutions` (reattach),
`StartPipelineExecution`, `DescribePipelineExecution`, `ListPipelineExecutionSteps`
(`StopPipelineExecution` when killed); then Model Registry `ListModelPackages` / `DescribeModelPackage` /
`UpdateModelPackage`. Waits (deferred) for the execution to Succeed (Failed / Stopped / CompletedWithFailures
fail with the failing step), then asks a reviewer in Airflow (**Browse > Required Actions**: the success
rate with its interval, the gate threshold, the smoke check, the pictures, the cost so far, the package) to
Approve or Reject with a comment, which is written to the package (`UpdateModelPackage`, approver and comment
in `ApprovalDescription`). A decision made in SageMaker Studio or with the CLI ends the step too, whichever
comes first; Rejected fails with the reviewer's reason. An "approval needed" SNS notification names the
package and the ways to decide when the step starts. Hands on the execution ARN, the model package ARN, its
model data URI and the decision (who, where, when, why).
"""

GROUP_ID = ids.VLA_GROUP
TASK_IDS = (ids.VLA_ENABLED, ids.PIPELINE_DEFINITION, ids.UPSERT_PIPELINE, ids.FIELD_DATASET, ids.FINETUNE_GROOT,
            ids.WAIT_FOR_APPROVAL)
#: The form field naming the Hugging Face token's secret, and the pipeline parameter carrying that name.
HF_SECRET_FIELD = "hf_token_secret_id"
HF_SECRET_PARAMETER = "HfTokenSecretId"
#: A Secrets Manager secret name (letters, digits, ``/_+=.@-``) or its ARN.
SECRET_ID_PATTERN = r"^([A-Za-z0-9/_+=.@-]{1,512}|arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+)?$"
#: Updated by ``wait_for_approval`` (the package ARN on the event).
MODEL_PACKAGE_ASSET = Asset(name="sim2real_approved_model_package", uri="sim2real://vla/approved-model-package")

@dataclass(frozen=True)
class VlaPlan(PlanSection):
    """The GR00T fine-tune pipeline of a run and its Model Registry group."""

    SECTION = "vla"
    enabled: bool
    pipeline_name: str
    role_arn: str
    model_package_group: str
    display_name: str
    parameters: dict[str, Any]  #: the pipeline execution's parameters (name → value)
    #: the step images configured for the run's GR00T version (processing / training / smoke_eval / inference →
    #: URI; :func:`sim2real.orchestration.config.groot_images`)
    images: dict[str, str]
    #: ``{"tracking_uri", "experiment_name"}`` when the run is tracked (the definition's ``MlflowConfig``; set by
    #: :func:`sim2real.orchestration.stages.run.apply_tracking`, with the ``MlflowRunId`` parameter), else ``None``
    mlflow: dict[str, str] | None = None
    #: the form's ``field_dataset_version`` (``None``, ``"latest"`` or ``"fd-<16 hex>"``), resolved by
    #: ``check_resources`` (:mod:`sim2real.orchestration.stages.vla_field`) in ``field_bucket`` / ``field_prefix``
    field_dataset_version: str | None = None
    field_bucket: str = ""
    field_prefix: str = ""


def params() -> dict[str, Any]:
    """The fine-tune's fields of the trigger form."""
    from airflow.sdk import Param

    return {
        "run_vla_finetune": Param(True, type="boolean", title="Fine-tune GR00T and release",
                                  description="Off: stop after the quality gate (RL only).", section=SECTION_VLA),
        "groot_version": Param(groot.DEFAULT_VERSION, type="string", enum=list(groot.VERSIONS),
                               title="GR00T version",
                               description="The GR00T generation to fine-tune (its base model under the bucket's "
                               "models/groot-base/<version>/; n1.6: models/groot-base/) and whose embodiment tags "
                               "are accepted. n1.7 (nvidia/GR00T-N1.7-3B) loads the gated nvidia/Cosmos-Reason2-2B "
                               "backbone: it needs a Hugging Face token secret.", section=SECTION_VLA),
        "embodiment_tag": Param("new_embodiment", type="string", pattern=r"^[a-z0-9_]+$",
                                title="Embodiment tag",
                                description="One of the chosen GR00T version's tags (checked when the run starts); "
                                "new_embodiment for a robot of your own.", section=SECTION_VLA),
        HF_SECRET_FIELD: Param(None, type=["null", "string"], pattern=SECRET_ID_PATTERN,
                               title="Hugging Face token secret",
                               description="AWS Secrets Manager secret (name or ARN) holding the Hugging Face token "
                               "(the string, or JSON with an HF_TOKEN key), e.g. sim2real-groot/hf-token (the pipeline role of infra/ "
                               "reads <prefix>-groot/*). The fine-tune and smoke check read it when "
                               "they start; only its name reaches the pipeline. Empty: the environment config's "
                               "sagemaker.hf_token_secret_id.", section=SECTION_VLA),
        "vla_instance_type": Param("ml.p4d.24xlarge", type="string", enum=list(VLA_INSTANCE_GPUS),
                                   title="Fine-tune instance type", section=SECTION_VLA),
        "vla_max_steps": Param(10_000, type="integer", title="Max steps",
                               section=SECTION_VLA, **_range(minimum=1, maximum=1_000_000)),
        "vla_global_batch_size": Param(32, type="integer", title="Global batch size", section=SECTION_VLA,
                                       **_range(minimum=1, maximum=4096)),
        "dataset_s3_uri": Param(None, type=["null", "string"], pattern=r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?)?$",
                                title="Dataset S3 URI", description="LeRobot dataset. Empty: the bucket's "
                                "datasets/default/.", section=SECTION_VLA),
        vla_field.FORM_FIELD: Param(None, type=["null", "string"], pattern=vla_field.PATTERN,
                                    title="Field dataset version",
                                    description="Field episodes appended to the dataset: 'latest' (the newest "
                                    "published version), a version 'fd-' + 16 hex digits, or empty: none (a run "
                                    "started by a new field dataset version uses that version).",
                                    section=SECTION_VLA),
    }


def hf_secret_id(params: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    """The Secrets Manager secret (name or ARN) of the Hugging Face token: the form's, else the environment
    config's ``sagemaker.hf_token_secret_id``, else ``""``. Only this name travels (pipeline parameter, training
    and processing environment ``HF_TOKEN_SECRET_ID``); the jobs read the value when they start."""
    return str(params.get(HF_SECRET_FIELD) or (env.get("sagemaker") or {}).get("hf_token_secret_id") or "")


def secret_name(secret_id: str) -> str:
    """The secret's name in a Secrets Manager secret id: the id itself, or the part after ``:secret:`` of its ARN
    (``arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 random characters>``, Secrets Manager User Guide,
    "Secret ARN"), suffix included."""
    return secret_id.split(":secret:", 1)[1] if secret_id.startswith("arn:") and ":secret:" in secret_id else secret_id


def secret_path_problem(secret_id: str, env: Mapping[str, Any]) -> str | None:
    """Why the pipeline role could not read ``secret_id`` (``None`` when it can, or when the environment config
    names no ``sagemaker.hf_token_secret_path``): the pipeline role of infra/ may call ``GetSecretValue`` only on
    secrets whose name starts with that path (``<prefix>-groot/``)."""
    path = str((env.get("sagemaker") or {}).get("hf_token_secret_path") or "")
    if not secret_id or not path or secret_name(secret_id).startswith(path):
        return None
    return (f"{HF_SECRET_FIELD} {secret_id!r} is outside {path}: the SageMaker pipeline role may read only the "
            f"secrets named {path}* (infra/: secretsmanager:GetSecretValue on <prefix>-groot/*), so the fine-tune "
            f"would fail when it starts. Store the Hugging Face token as e.g. {path}hf-token and name that")


def base_model_uri(bucket: str, version: str) -> str:
    """Where the base checkpoint of ``version`` is expected: ``s3://<bucket>/`` and the key prefix of
    :func:`sim2real.contract.groot.base_model_prefix`."""
    return f"s3://{bucket}/{groot.base_model_prefix(version)}"


def rule_errors(params: Mapping[str, Any], env: Mapping[str, Any]) -> list[str]:
    """The fine-tune's cross-field rules (:func:`sim2real.orchestration.stages.run.check_params` lists them): the
    embodiment tag is one of the chosen GR00T version's (:func:`sim2real.contract.groot.embodiment_problem`),
    a version with a gated download has a Hugging Face token secret (form or environment config), that secret is
    one the pipeline role may read (:func:`secret_path_problem`), and a version
    other than the default has its own training and smoke-eval images in the environment config
    (:func:`sim2real.orchestration.config.missing_groot_images`: ``sagemaker.images`` are built for the default).

    :return: one sentence per broken rule (none when the fine-tune is off).
    """
    if not params.get("run_vla_finetune", True):
        return []
    version = params.get("groot_version") or groot.DEFAULT_VERSION
    errors = []
    problem = groot.embodiment_problem(version, str(params.get("embodiment_tag") or "new_embodiment"))
    if problem:
        errors.append(problem)
    rel = groot.release(version)
    if rel.needs_hf_token and not hf_secret_id(params, env):
        errors.append(f"groot_version {version!r} loads the gated {rel.backbone}: set {HF_SECRET_FIELD} (a Secrets "
                      "Manager secret holding a Hugging Face token that accepted its terms) or the environment "
                      "config's sagemaker.hf_token_secret_id")
    outside = secret_path_problem(hf_secret_id(params, env), env)
    if outside:
        errors.append(outside)
    missing = missing_groot_images(env.get("sagemaker") or {}, version)
    if missing:
        errors.append(f"groot_version {version!r} has no SageMaker images: the environment config lacks "
                      f"{', '.join(missing)} (sagemaker.images are built for Isaac-GR00T's {groot.DEFAULT_VERSION}, "
                      f"the GROOT_COMMIT containers/groot pins). Build containers/groot/Dockerfile.gr00t's training "
                      f"and smoke-eval targets with GROOT_COMMIT set to the commit of Isaac-GR00T's {version}-release "
                      f"tag and set sagemaker.{IMAGES_BY_VERSION}.{version} to "
                      '{"training": <ECR URI>, "smoke_eval": <ECR URI>} (containers/groot/README.md), or pick '
                      f"groot_version {groot.DEFAULT_VERSION!r}")
    return errors


def plan(ctx: PlanContext) -> VlaPlan:
    p, sm = ctx.params, ctx.env["sagemaker"]
    version = p.get("groot_version") or groot.DEFAULT_VERSION
    return VlaPlan(
        enabled=bool(p["run_vla_finetune"]),
        pipeline_name=sm["pipeline_name"],
        role_arn=sm["pipeline_role_arn"],
        model_package_group=sm["model_package_group"],
        display_name=ctx.run_key,
        parameters={
            "RunKey": ctx.run_key,
            "EmbodimentTag": p["embodiment_tag"],
            "GrootVersion": version,
            HF_SECRET_PARAMETER: hf_secret_id(p, ctx.env),
            "BaseModelS3Uri": base_model_uri(ctx.bucket, version),
            "DatasetS3Uri": p.get("dataset_s3_uri") or f"s3://{ctx.bucket}/datasets/default/",
            "OutputS3Uri": f"{ctx.run_uri}vla/",
            "InstanceType": p["vla_instance_type"],
            "MaxSteps": int(p["vla_max_steps"]),
            "GlobalBatchSize": int(p["vla_global_batch_size"]),
            "NumGpus": VLA_INSTANCE_GPUS[p["vla_instance_type"]],
            vla_field.PIPELINE_PARAMETER: "",  # set by the field_dataset task
        },
        images=groot_images(sm, version),
        field_dataset_version=p.get(vla_field.FORM_FIELD) or None,
        field_bucket=ctx.bucket,
        field_prefix="",  # the robots' field data: <prefix>field/ in the artifacts bucket (deploy's field_prefix)
    )


def definition_text(plan: Mapping[str, Any], run_image_uri: str) -> str:
    """The ``vla.pipeline_definition`` task: the SDK-generated template (``make pipeline-definition``) filled with
    this environment's values and the plan's step images (those of the run's GR00T version, resolved when the run
    was planned) as plain JSON: no SageMaker SDK in the Airflow runtime, the same bytes for the same values (the
    upsert stays a no-op and step caching survives).

    :param plan: the run's plan (``bucket`` and the ``vla`` section).
    :param run_image_uri: this run's training image (CodeBuild), for a step image the environment config lacks
        (the sandbox; only the default GR00T version may lack one, :func:`rule_errors`).
    :return: the definition (canonical JSON text).
    """
    import hashlib
    import logging

    section = VlaPlan.from_plan(plan)
    configured = section.images
    images = {"processing": run_image_uri, "training": run_image_uri, "smoke_eval": run_image_uri, **configured}
    fallback = sorted({"processing", "training", "smoke_eval"} - set(configured))
    if fallback:
        logging.getLogger(__name__).warning(
            "environment config sagemaker.images lacks %s: using this run's training image %s",
            ", ".join(fallback), run_image_uri)
    text = pipeline_definition_json(role_arn=section.role_arn, model_package_group=section.model_package_group,
                                    images=images, bucket=plan["bucket"], mlflow=section.mlflow)
    logging.getLogger(__name__).info("GR00T pipeline definition sha256 %s (%d bytes), images %s",
                                     hashlib.sha256(text.encode()).hexdigest(), len(text), images)
    return text


def add_tasks(plan: Any, *, image: Any, gate: Any, resources: Any) -> Any:
    """Add the ``vla`` group after the quality gate; return the approval step (its ``output``: the
    model package ARN, model data URI and the decision). ``resources``: the ``check_resources`` operator, whose
    ``field_dataset`` is the version the fine-tune includes."""
    from airflow.sdk import TaskGroup, task

    from sim2real.orchestration import notifications as notify
    from sim2real.orchestration.operators.sagemaker_pipeline import (PipelineDefinitionUpsertOperator,
                                                                     PipelineExecutionOperator)
    from sim2real.orchestration.operators.model_approval import ModelPackageApprovalOperator

    vla = refs(plan, VlaPlan)
    with TaskGroup(GROUP_ID, tooltip="GR00T fine-tune (SageMaker Pipelines) and Model Registry approval",
                   doc_md=DOC):

        @task.short_circuit(task_id=ids.local(ids.VLA_ENABLED), ignore_downstream_trigger_rules=False)
        def vla_enabled(plan: dict) -> bool:
            return VlaPlan.from_plan(plan).enabled

        @task(task_id=ids.local(ids.PIPELINE_DEFINITION), execution_timeout=dt.timedelta(minutes=1))
        def pipeline_definition(plan: dict, image: dict) -> str:
            return definition_text(plan, image["image_uri"])

        @task(task_id=ids.local(ids.FIELD_DATASET), inlets=[assets.FIELD_DATASET_ASSET], multiple_outputs=True,
              execution_timeout=dt.timedelta(minutes=2))
        def field_dataset(plan: dict, resources: dict) -> dict:
            # The field dataset version check_resources resolved and checked before any spend (its
            # "field_dataset"), never resolved again: "latest" may have moved on during the training. The
            # execution's parameters with its manifest URI (FieldDatasetManifestS3Uri, "" = none).
            from airflow.sdk.exceptions import AirflowFailException

            from sim2real.orchestration.tracking import record_field_dataset

            if "field_dataset" not in (resources or {}):
                raise AirflowFailException(f"{ids.CHECK_RESOURCES} handed on no field dataset (its XCom: "
                                           f"{sorted(resources or {})}): rerun the run from {ids.CHECK_RESOURCES}")
            entry = resources["field_dataset"]
            record_field_dataset(plan.get("tracking"), entry)
            return {"field_dataset": entry, "pipeline_params": dict(
                VlaPlan.from_plan(plan).parameters,
                **{vla_field.PIPELINE_PARAMETER: entry["manifest_uri"] if entry else ""})}

        enabled = vla_enabled(plan["plan"])
        definition = pipeline_definition(plan["plan"], image.output)
        field = field_dataset(plan["plan"], resources.output)
        upsert = PipelineDefinitionUpsertOperator(
            task_id=ids.local(ids.UPSERT_PIPELINE),
            pipeline_name=vla.pipeline_name,
            definition=definition,
            role_arn=vla.role_arn,
            execution_timeout=dt.timedelta(minutes=5),
        )
        finetune = PipelineExecutionOperator(
            task_id=ids.local(ids.FINETUNE_GROOT),
            pipeline_name=vla.pipeline_name,
            display_name=vla.display_name,
            pipeline_params=field["pipeline_params"],
            check_interval=POLL,
            multiple_outputs=True,
            execution_timeout=dt.timedelta(hours=30),
            doc_md=DOC,
        )
        approval = ModelPackageApprovalOperator(
            task_id=ids.local(ids.WAIT_FOR_APPROVAL),
            model_package_group_name=vla.model_package_group,
            run_key=plan["run_key"],
            pipeline_execution_arn=finetune.output["pipeline_execution_arn"],
            plan=plan["plan"],  # the review shown to the approver, with the retraining rounds so far
            review=functools.partial(approval_body, rounds_entry=lineage_entry),
            poke_interval=POLL,
            response_timeout=dt.timedelta(hours=24),
            execution_timeout=dt.timedelta(minutes=15),  # locating the package, the review, UpdateModelPackage
            outlets=[MODEL_PACKAGE_ASSET],
            multiple_outputs=True,  # approval.output["model_package_arn"] for the deploy-time check
            post_execute=assets.model_package_post_execute,  # package ARN on the asset event
            doc_md=DOC,
            on_execute_callback=notify.approval_needed(),
        )
        gate >> enabled >> field >> definition >> upsert >> finetune >> approval
    return approval
