"""The one environment config: account-specific names and ARNs the DAGs use.

infra/ (CDK) exports this document to the SSM parameter ``/sim2real/environment`` and the
deployment copies it into the Airflow Variable ``sim2real_environment``; the local sandbox
writes the same shape (``sim2real.dev.sandbox.provision``). DAG code reads it **at run time only**
(``load_environment()`` inside a task), never at import time.

Shape (JSON object; every key below is required unless marked optional)::

    {
      "region": "us-east-1",
      "account_id": "123456789012",
      "artifacts_bucket": "sim2real-artifacts-123456789012",
      "image_build": {
        "codebuild_project": "sim2real-training-image",
        "ecr_repository": "sim2real-training",
        "source_version": "main"              # git ref / S3 object version CodeBuild builds
      },
      "batch": {
        "job_queue": "sim2real-gpu",
        "job_definition": "sim2real-train",   # multinode job definition (name, no revision)
        "compute_environment": "sim2real-gpu-ce",
        "instance_type": "g6.12xlarge",       # what the compute environment launches
        "log_group": "/aws/batch/job"
      },
      "quota": {"service_code": "ec2", "quota_code": "L-DB2E81BA"},   # optional; resolved
      "evaluation": {
        "workstation_tag_key": "sim2real:role",
        "workstation_tag_value": "workstation",
        "output_prefix": "ssm-output",        # optional
        "command_template": "sim2real-evaluate ..."   # optional, see DEFAULT_EVAL_COMMAND
      },
      "sagemaker": {
        "pipeline_name": "sim2real-groot-finetune",
        "pipeline_role_arn": "arn:aws:iam::123456789012:role/sim2real-pipeline",
        "model_package_group": "sim2real-groot-models",
        "hf_token_secret_id": "sim2real-groot/hf-token",  # optional; Secrets Manager secret of the Hugging Face
                                               # token (GR00T N1.7); the form's hf_token_secret_id wins
        "hf_token_secret_path": "sim2real-groot/",   # optional; the secret names the pipeline role may read
                                               # (infra/: <prefix>-groot/); a token secret outside is refused
        "images": {                            # optional; the pipeline's step images (ECR URIs, by digest) for
          "processing": "...", "training": "...", "smoke_eval": "...",   # GR00T DEFAULT_VERSION (n1.6, the
          "inference": "..."                   # Isaac-GR00T commit containers/groot pins); optional, = training
        },                                     # (a missing one: the run's own training image, for the sandbox)
        "images_by_groot_version": {           # optional; the images of another GR00T version (built with
          "n1.7": {"training": "...", "smoke_eval": "..."}   # GROOT_COMMIT of its release): training and
        }                                      # smoke_eval required, processing / inference optional (processing
      },                                       # defaults to images.processing: it holds no Isaac-GR00T)
      "greengrass": {
        "thing_group_name": "sim2real-robots",
        "components": {                       # component name -> version to deploy
          "com.sim2real.PolicySetup": "1.0.0",
          "com.sim2real.PolicyInference": "1.0.0",
          "com.sim2real.PolicyBenchmark": "1.0.0",
          "com.sim2real.FieldUploader": "1.0.0"
        }
      },
      "hyperpod": {                            # optional; needed by training_backend "hyperpod"
        "cluster_name": "sim2real-hyperpod",
        "gpu_instance_group": "gpu",           # the group scaled up for training and back down after
        "instance_type": "ml.g5.12xlarge",     # optional; the gpu group's type, for the cost estimate
        "head_instance_group": "head",
        "min_count": 0,                        # optional (default 0): the gpu group's size between runs
        "submit_host_tag_key": "sim2real:role",     # EC2 tag of the head/login node with the Slurm
        "submit_host_tag_value": "hyperpod-head",   # client, managed by SSM (sbatch/sacct/scancel run there)
        "partition": "dev",                    # optional; HyperPod managed Slurm's partition
        "shared_dir": "/fsx/sim2real",         # optional; batch scripts and job logs (shared storage)
        "launcher": "/usr/local/bin/distributed_run.bash",   # optional; the launcher in the image (both images)
        "use_container_image": true,           # optional; run in the build's image with pyxis/enroot
        "container_mounts": "/fsx:/fsx"        # optional; pyxis --container-mounts
      },
      "approval": {                            # optional; who may release a model (four-eyes, see
        "approvers": ["bob", "carol"],         # sim2real.orchestration.operators.model_approval): Airflow
                                               # user ids (the auth manager's user id) allowed to answer the
                                               # release request (HITL assigned_users); absent or []: any
                                               # user who may act on the task, except the one who triggered
        "aws_identities": {"alice": ["arn:aws:sts::123456789012:assumed-role/ml-engineer/alice"]},
                                               # optional; Airflow user id -> the SageMaker identities (IAM ARN
                                               # or Studio user profile) the person decides with in the registry
        "self_approval": false                 # optional (default false); true only where one person is every
      },                                       # user (the local sandbox UI's anonymous admin)
      "notifications": {"sns_topic_arn": "arn:aws:sns:..."},   # optional; no topic = notifications skipped
      "airflow": {"mwaa_environment_name": "sim2real"},        # optional; the run note is set through this
                                               # environment's REST API (default: MWAA's AIRFLOW_ENV_NAME)
      "mlflow": {                              # optional; no tracking_uri = runs untracked
        "tracking_uri": "arn:aws:sagemaker:...:mlflow-tracking-server/sim2real",   # or http(s)://host:port
        "experiment_name": "sim2real",         # optional (default sim2real)
        "ui_url": "https://..."                # optional; default the server's TrackingServerUrl
      },                                       # (see sim2real.orchestration.tracking)
      "schedule_timezone": "UTC",              # optional (default UTC); IANA zone of the nightly 02:00 run.
                                               # The DAG reads it at parse time from the Airflow option
                                               # [sim2real] schedule_timezone, which infra/ sets to this value
      "run_defaults": {                        # optional; params of SCHEDULED (nightly) runs, over the
        "task": "Isaac-Velocity-Rough-H1",     # form's sandbox-sized defaults (manual runs keep the form)
        "num_nodes": 2, "max_iterations": 3000, "train_time_budget_seconds": 0
      },
      "events": {                               # optional; waits resume on AWS events (EventBridge -> SQS)
        "mode": "events",                      # "events" (infra/ and the sandbox write it) or "polling"; see
        "queue_url": "https://sqs...",         # sim2real.orchestration.events.settings for every key
        "reconcile_interval_seconds": 600
      },
      "field_data": {"min_new_episodes": 50},  # optional; new field episodes (with recorded data) that make
                                               # sim_to_real_field_data publish a field dataset version (and
                                               # start a sim_to_real run); see FIELD_DATA_DEFAULTS
      "sandbox": false                          # optional; true only in the local sandbox
    }
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from sim2real.contract import evaluator as evaluator_contract
from sim2real.contract import groot
from sim2real.orchestration.events.settings import EventSettings, settings_problems

#: Airflow Variable holding the environment config (JSON).
ENV_VARIABLE = "sim2real_environment"
#: SSM parameter infra/ writes the same document to.
ENV_SSM_PARAMETER = "/sim2real/environment"

#: Tag key every resource started by a run carries (value: the run key).
RUN_KEY_TAG = "sim2real:run-key"

REQUIRED: dict[str, tuple[str, ...]] = {
    "": ("region", "artifacts_bucket", "image_build", "batch", "evaluation", "sagemaker", "greengrass"),
    "image_build": ("codebuild_project", "ecr_repository", "source_version"),
    "batch": ("job_queue", "job_definition", "compute_environment", "instance_type"),
    "evaluation": ("workstation_tag_key", "workstation_tag_value"),
    "sagemaker": ("pipeline_name", "pipeline_role_arn", "model_package_group"),
    "greengrass": ("thing_group_name", "components"),
}

#: Command the evaluation workstation runs: a ``str.format`` template over the evaluator contract's fields
#: (:mod:`sim2real.contract.evaluator`: its arguments and ``contract_version``; ``task`` too, for a custom
#: command). The sandbox and the workstation AMI both have ``sim2real-evaluate`` on PATH.
DEFAULT_EVAL_COMMAND = evaluator_contract.default_template()


class EnvironmentConfigError(ValueError):
    """The environment config is missing or lacks a required key (message names the key)."""


def validate_environment(env: Mapping[str, Any]) -> dict[str, Any]:
    """Check the required keys of an environment config and return it as a plain dict.

    :raises EnvironmentConfigError: naming every missing key (dotted path).
    """
    if not isinstance(env, Mapping):
        raise EnvironmentConfigError(f"environment config must be a JSON object, got {type(env).__name__}")
    missing = []
    for section, keys in REQUIRED.items():
        scope = env if not section else env.get(section)
        if section and not isinstance(scope, Mapping):
            missing.append(section)
            continue
        for key in keys:
            if scope.get(key) in (None, ""):
                missing.append(f"{section}.{key}" if section else key)
    problems = (_hyperpod_problems(env.get("hyperpod")) + approval_problems(env.get("approval"))
                + field_data_problems(env.get("field_data")) + groot_images_problems(env.get("sagemaker")))
    mlflow = env.get("mlflow")
    if mlflow is not None:
        from sim2real.contract.tracking import check_tracking_uri

        if not isinstance(mlflow, Mapping):
            problems.append(f"mlflow must be an object, got {type(mlflow).__name__}")
        elif mlflow.get("tracking_uri"):
            try:
                check_tracking_uri(mlflow["tracking_uri"])
            except ValueError as err:
                problems.append(f"mlflow.tracking_uri: {err}")

    template = (env.get("evaluation") or {}).get("command_template") if isinstance(env.get("evaluation"), Mapping) else None
    if template:
        problems += [f"evaluation.command_template: {p}" for p in evaluator_contract.template_problems(str(template))]
    problems += [f"{p}" for p in settings_problems(env.get("events"))]
    if env.get("schedule_timezone") is not None:
        try:
            check_timezone(env["schedule_timezone"])
        except ValueError as err:
            problems.append(f"schedule_timezone: {err}")
    if missing or problems:
        raise EnvironmentConfigError(
            "; ".join(
                (["environment config is missing: " + ", ".join(missing)] if missing else [])
                + [f"environment config {p}" for p in problems]
            )
            + f" (set the Airflow Variable {ENV_VARIABLE!r} from the SSM parameter {ENV_SSM_PARAMETER!r} "
            "that infra/ writes)"
        )
    return json.loads(json.dumps(dict(env)))


#: Optional ``hyperpod`` keys and their defaults (:func:`hyperpod_settings`).
HYPERPOD_DEFAULTS: dict[str, Any] = {
    "cluster_name": "",
    "gpu_instance_group": "gpu",
    # The GPU group's instance type (e.g. "ml.g5.12xlarge"), for the run's cost estimate only: the
    # scaling itself reads the group from DescribeCluster. "" = unknown (a run under a budget is refused).
    "instance_type": "",
    "head_instance_group": "head",
    "min_count": 0,
    "submit_host_tag_key": "",
    "submit_host_tag_value": "",
    "partition": "dev",
    "shared_dir": "/fsx/sim2real",
    # Where containers/rl and containers/isaaclab install the launcher (the image CodeBuild builds).
    "launcher": "/usr/local/bin/distributed_run.bash",
    "use_container_image": True,
    "container_mounts": "/fsx:/fsx",
}


def _hyperpod_problems(section: Any) -> list[str]:
    """Type problems of the optional ``hyperpod`` section (each names the key and the fix)."""
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [f"hyperpod must be an object, got {type(section).__name__}"]
    problems = []
    for key, value in section.items():
        if key not in HYPERPOD_DEFAULTS:
            continue
        default = HYPERPOD_DEFAULTS[key]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                problems.append(f"hyperpod.{key} must be true or false, got {value!r}")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"hyperpod.{key} must be an integer >= 0, got {value!r}")
        elif not isinstance(value, str):
            problems.append(f"hyperpod.{key} must be a string, got {value!r}")
    tag_key, tag_value = section.get("submit_host_tag_key"), section.get("submit_host_tag_value")
    if bool(tag_key) != bool(tag_value):
        problems.append("hyperpod.submit_host_tag_key and hyperpod.submit_host_tag_value go together "
                        "(the EC2 tag of the head/login node): set both or neither")
    shared = section.get("shared_dir")
    if isinstance(shared, str) and shared and not shared.startswith("/"):
        problems.append(f"hyperpod.shared_dir must be an absolute path on the cluster, got {shared!r}")
    return problems


#: The GR00T pipeline's step images (``sagemaker.images`` and each ``sagemaker.images_by_groot_version`` entry).
GROOT_IMAGE_KEYS = ("processing", "training", "smoke_eval", "inference")
#: The images a non-default GR00T version needs of its own: those that run Isaac-GR00T (containers/groot/
#: Dockerfile.gr00t, built for one ``GROOT_COMMIT``); the processing image (Dockerfile.processing) holds none.
GROOT_VERSION_IMAGE_KEYS = ("training", "smoke_eval")
IMAGES_BY_VERSION = "images_by_groot_version"


def _image_map_problems(images: Any, where: str) -> list[str]:
    if not isinstance(images, Mapping):
        return [f"{where} must be an object of image URIs ({', '.join(GROOT_IMAGE_KEYS)}), got {images!r}"]
    unknown = sorted(set(images) - set(GROOT_IMAGE_KEYS))
    problems = [f"{where} has unknown keys {unknown} (known: {list(GROOT_IMAGE_KEYS)}; the images of another GR00T "
                f"version go in sagemaker.{IMAGES_BY_VERSION}.<version>)"] if unknown else []
    return problems + [f"{where}.{k} must be an image URI (a non-empty string), got {v!r}"
                       for k, v in images.items() if k in GROOT_IMAGE_KEYS and (not isinstance(v, str) or not v)]


def groot_images_problems(sagemaker: Any) -> list[str]:
    """Shape problems of ``sagemaker.images`` and ``sagemaker.images_by_groot_version`` (each names the key)."""
    if not isinstance(sagemaker, Mapping):
        return []  # reported as a missing section
    problems = [] if sagemaker.get("images") is None else _image_map_problems(sagemaker["images"], "sagemaker.images")
    by_version = sagemaker.get(IMAGES_BY_VERSION)
    if by_version is None:
        return problems
    if not isinstance(by_version, Mapping):
        return problems + [f"sagemaker.{IMAGES_BY_VERSION} must map GR00T versions to image objects, got {by_version!r}"]
    for version, images in by_version.items():
        if version not in groot.VERSIONS:
            problems.append(f"sagemaker.{IMAGES_BY_VERSION} has unknown GR00T version {version!r} "
                            f"(one of {list(groot.VERSIONS)})")
        else:
            problems += _image_map_problems(images, f"sagemaker.{IMAGES_BY_VERSION}.{version}")
    return problems


def groot_images(sagemaker: Mapping[str, Any], version: str) -> dict[str, str]:
    """The step images (:data:`GROOT_IMAGE_KEYS` → URI) configured for GR00T ``version``.

    ``DEFAULT_VERSION`` (:mod:`sim2real.contract.groot`): ``sagemaker.images`` with its
    ``images_by_groot_version`` entry (if any) over it. Another version: its own entry, with ``images.processing``
    when the entry names none (the processing image is the same for every version). Keys nothing names are absent.
    """
    images = dict(sagemaker.get("images") or {})
    own = dict((sagemaker.get(IMAGES_BY_VERSION) or {}).get(version) or {})
    if version == groot.DEFAULT_VERSION:
        return {**images, **own}
    return {**({"processing": images["processing"]} if images.get("processing") else {}), **own}


def missing_groot_images(sagemaker: Mapping[str, Any], version: str) -> list[str]:
    """The images GR00T ``version`` lacks (:data:`GROOT_VERSION_IMAGE_KEYS`, as dotted keys of the environment
    config), ``[]`` for ``DEFAULT_VERSION``, whose missing images fall back to the run's training image."""
    if version == groot.DEFAULT_VERSION:
        return []
    own = (sagemaker.get(IMAGES_BY_VERSION) or {}).get(version) or {}
    return [f"sagemaker.{IMAGES_BY_VERSION}.{version}.{k}" for k in GROOT_VERSION_IMAGE_KEYS if not own.get(k)]


#: Defaults of the optional ``approval`` section (:func:`approval_settings`).
APPROVAL_DEFAULTS: dict[str, Any] = {"approvers": [], "aws_identities": {}, "self_approval": False}


def approval_problems(section: Any) -> list[str]:
    """Problems of the optional ``approval`` section (each names the key and what it must be)."""
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [f"approval must be an object, got {type(section).__name__}"]
    problems = []
    unknown = sorted(set(section) - set(APPROVAL_DEFAULTS))
    if unknown:
        problems.append(f"approval has unknown keys {unknown} (known: {sorted(APPROVAL_DEFAULTS)})")
    approvers = section.get("approvers", [])
    if not isinstance(approvers, list) or not all(isinstance(a, str) and a.strip() == a and a for a in approvers):
        problems.append(f"approval.approvers must be a list of Airflow user ids (non-empty strings, no surrounding "
                        f"spaces), got {approvers!r}")
    identities = section.get("aws_identities", {})
    if not isinstance(identities, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, list) and all(isinstance(i, str) and i for i in v)
            for k, v in identities.items()):
        problems.append("approval.aws_identities must map Airflow user ids to lists of SageMaker identities "
                        f"(IAM ARNs or Studio user profile names), got {identities!r}")
    if not isinstance(section.get("self_approval", False), bool):
        problems.append(f"approval.self_approval must be true or false, got {section.get('self_approval')!r}")
    return problems


def approval_settings(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """The environment config's ``approval`` section with :data:`APPROVAL_DEFAULTS` filled in (a copy)."""
    section = (env or {}).get("approval") or {}
    return json.loads(json.dumps({**APPROVAL_DEFAULTS, **{k: v for k, v in section.items() if v is not None}}))


#: Defaults of the optional ``field_data`` section (:func:`field_data_settings`): ``min_new_episodes``, the new
#: field episodes with recorded data (not in the last published version) a new field dataset version needs.
FIELD_DATA_DEFAULTS: dict[str, Any] = {"min_new_episodes": 50}


def min_new_episodes_problem(value: Any, where: str) -> str | None:
    """Why ``value`` is not a threshold of new field episodes (an integer >= 1), naming ``where``; None if it is."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{where} must be an integer >= 1 (new field episodes a dataset version needs), got {value!r}"
    return None


def field_data_problems(section: Any) -> list[str]:
    """Problems of the optional ``field_data`` section (each names the key and what it must be)."""
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [f"field_data must be an object, got {type(section).__name__}"]
    problems = [f"field_data has unknown keys {sorted(set(section) - set(FIELD_DATA_DEFAULTS))} "
                f"(known: {sorted(FIELD_DATA_DEFAULTS)})"] if set(section) - set(FIELD_DATA_DEFAULTS) else []
    if "min_new_episodes" in section:
        problem = min_new_episodes_problem(section["min_new_episodes"], "field_data.min_new_episodes")
        problems += [problem] if problem else []
    return problems


def field_data_settings(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """The environment config's ``field_data`` section with :data:`FIELD_DATA_DEFAULTS` filled in (a copy)."""
    section = (env or {}).get("field_data") or {}
    return {**FIELD_DATA_DEFAULTS, **{k: v for k, v in section.items() if v is not None}}


def check_timezone(name: Any) -> str:
    """``name`` if it is an IANA time zone name (``UTC``, ``Europe/Berlin``), else ValueError saying so."""
    import zoneinfo

    try:
        if not isinstance(name, str) or not name:
            raise ValueError
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone name (e.g. UTC, Europe/Berlin)") from None
    return name


def hyperpod_settings(env: Mapping[str, Any]) -> dict[str, Any]:
    """The environment config's ``hyperpod`` section with :data:`HYPERPOD_DEFAULTS` filled in."""
    section = env.get("hyperpod") or {}
    return {**HYPERPOD_DEFAULTS, **{k: v for k, v in section.items() if v is not None}}


def load_environment() -> dict[str, Any]:
    """Read the environment config at run time.

    Order: the Airflow Variable ``sim2real_environment`` (which Airflow also resolves from the
    ``AIRFLOW_VAR_SIM2REAL_ENVIRONMENT`` environment variable or a secrets backend), then the
    file named by ``SIM2REAL_ENVIRONMENT_FILE``. Call only inside a running task.

    :raises EnvironmentConfigError: when none is set or a required key is missing.
    """
    raw: Any = None
    try:
        from airflow.sdk import Variable

        raw = Variable.get(ENV_VARIABLE, default=None)
    except Exception:  # noqa: BLE001 - outside a task runner there is no Variable API
        raw = os.environ.get("AIRFLOW_VAR_" + ENV_VARIABLE.upper())
    if raw is None and os.environ.get("SIM2REAL_ENVIRONMENT_FILE"):
        with open(os.environ["SIM2REAL_ENVIRONMENT_FILE"], encoding="utf-8") as fh:
            raw = fh.read()
    if raw is None:
        raise EnvironmentConfigError(
            f"no environment config: set the Airflow Variable {ENV_VARIABLE!r} "
            f"(from the SSM parameter {ENV_SSM_PARAMETER!r} that infra/ writes)"
        )
    env = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    return validate_environment(env)


def task_events_section(log: Any = None) -> dict[str, Any] | None:
    """The running task's environment config ``events`` section, for an operator to pass to its trigger
    (its keys: :mod:`sim2real.orchestration.events.settings`).

    :return: the section (JSON-serializable), or None when the environment config has none or no environment
        config is set (the trigger then polls; logged when ``log`` is given).
    :raises ValueError: when the section is invalid (the message names the key).
    """
    try:
        section = load_environment().get("events")
    except EnvironmentConfigError as err:
        if log is not None:
            log.info("No environment config (%s): the wait polls", err)
        return None
    if section is None:
        return None
    EventSettings.from_dict(section)  # refuses a bad section with the reason
    return dict(section)
