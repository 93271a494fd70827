"""Environment configs (the ``sim2real_environment`` Variable) for the orchestration tests."""

from __future__ import annotations

import json

#: The smallest config :func:`sim2real.orchestration.config.validate_environment` accepts (every required key,
#: toy values).
MINIMAL_ENVIRONMENT = {
    "region": "us-east-1", "artifacts_bucket": "b",
    "image_build": {"codebuild_project": "p", "ecr_repository": "r", "source_version": "main"},
    "batch": {"job_queue": "q", "job_definition": "d", "compute_environment": "ce", "instance_type": "g6.12xlarge"},
    "evaluation": {"workstation_tag_key": "k", "workstation_tag_value": "v"},
    "sagemaker": {"pipeline_name": "p", "pipeline_role_arn": "arn:aws:iam::1:role/r", "model_package_group": "g"},
    "greengrass": {"thing_group_name": "t", "components": {"c": "1.0.0"}},
}

#: Step images built for GR00T N1.5 and N1.7 (``sagemaker.images_by_groot_version``): a run of a version other than
#: the default is refused without its own (:func:`sim2real.orchestration.config.missing_groot_images`).
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
GROOT_VERSION_IMAGES = {v: {"training": f"{ECR}/sim2real-groot-training:{v}",
                            "smoke_eval": f"{ECR}/sim2real-groot-smoke-eval:{v}"} for v in ("n1.5", "n1.7")}
#: :data:`MINIMAL_ENVIRONMENT` with :data:`GROOT_VERSION_IMAGES`.
VERSIONED_ENVIRONMENT = {**MINIMAL_ENVIRONMENT, "sagemaker": {**MINIMAL_ENVIRONMENT["sagemaker"],
                                                              "images_by_groot_version": GROOT_VERSION_IMAGES}}


def use_environment(monkeypatch, env: dict) -> None:
    """Make ``env`` the environment config the tasks load: the ``sim2real_environment`` Variable (from the
    environment, ``AIRFLOW_VAR_SIM2REAL_ENVIRONMENT``), with no ``SIM2REAL_ENVIRONMENT_FILE`` in its way."""
    monkeypatch.delenv("SIM2REAL_ENVIRONMENT_FILE", raising=False)
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(env))
