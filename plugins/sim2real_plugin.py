"""Airflow plugin: registers the project's operator extra links so the UI renders them.

Links of operators outside an installed provider must be declared by a plugin to survive DAG
serialization. Each link reads an XCom its operator persisted during ``execute`` (provider style,
``BaseAwsLink.persist``) and formats an AWS console URL.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from sim2real.orchestration.links.batch import BatchNodeLogsLink
from sim2real.orchestration.links.codebuild import CodeBuildBuildLink
from sim2real.orchestration.links.greengrass import GreengrassDeploymentLink
from sim2real.orchestration.links.mlflow import MlflowRunLink
from sim2real.orchestration.links.s3 import FIGURE_LINKS, S3RunFolderLink
from sim2real.orchestration.links.sagemaker import HyperPodClusterLink, SageMakerModelPackageLink, SageMakerPipelineExecutionLink
from sim2real.orchestration.links.ssm import SsmRunCommandLink, WorkstationInstanceLink


class Sim2RealPlugin(AirflowPlugin):
    """Extra links: CodeBuild build, Batch node log streams, SSM command, workstation, pipeline
    execution, model package, HyperPod cluster, Greengrass deployment, the run's S3 folder, each of the run
    report's pictures (``FIGURE_LINKS``: training curve, evaluation outcome, success rate per round, simulation vs
    field), the run's MLflow parent run."""

    name = "sim2real"
    operator_extra_links = [
        CodeBuildBuildLink(),
        BatchNodeLogsLink(),
        SsmRunCommandLink(),
        WorkstationInstanceLink(),
        SageMakerPipelineExecutionLink(),
        SageMakerModelPackageLink(),
        HyperPodClusterLink(),
        GreengrassDeploymentLink(),
        S3RunFolderLink(),
        *(link() for link in FIGURE_LINKS.values()),
        MlflowRunLink(),
    ]
