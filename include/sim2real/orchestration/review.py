"""What the reviewer of a fine-tuned model sees in Airflow before approving or rejecting its release.

:func:`approval_body` is the Markdown body of the approval step's human-in-the-loop request (Airflow's
Required Actions page renders it): the evaluation's success rate with its Wilson 95 % interval against the
gate threshold and the gate verdict (the run note's headline, :func:`sim2real.orchestration.run_note.headline`),
the GR00T smoke check's result (``smoke.json`` of the pipeline's SmokeEval step), the cost so far, links to the
training-curve and evaluation pictures (drawn now, as the report stage draws them, under
``runs/<run_key>/report/``), the MLflow run and the model package (SageMaker console, ARN, the CLI command).

Links are URLs, never local paths: S3 console pages on AWS; presigned URLs on the sandbox's S3, where the
pictures are also embedded (the browser loads them from 127.0.0.1). Nothing here fails the approval step: a
figure or a fact that cannot be read is shown as unknown with the reason (logged).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from sim2real.contract.storage import split_s3
from sim2real.orchestration.lineage import FIGURES, RoundsEntry, build_lineage, stage_sources
from sim2real.orchestration.params import gate_warnings
from sim2real.orchestration.run_note import headline

log = logging.getLogger(__name__)

#: Object of the SmokeEval step's report under the pipeline's ``OutputS3Uri`` (``pipelines/groot``: the
#: ``smoke`` processing output, ``smoke.json``).
SMOKE_REPORT = "smoke/smoke.json"


def smoke_line(report: Mapping[str, Any] | None, uri: str | None, error: str | None = None) -> str:
    """The smoke check's line: passed / FAILED with its reason, or why it is unknown."""
    if report is None:
        return f"**Smoke check:** unknown ({error or 'no report'}{f', {uri}' if uri else ''})."
    verdict = "passed" if report.get("passed") is True else "FAILED"
    reason = report.get("reason")
    return f"**Smoke check:** {verdict}" + (f" ({reason})" if reason else "") + (f", `{uri}`" if uri else "")


def read_smoke_report(plan: Mapping[str, Any], s3_hook: Any) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """``(smoke.json, its URI, why it is missing)`` of this run's fine-tune (``OutputS3Uri`` + :data:`SMOKE_REPORT`)."""
    output = ((plan.get("vla") or {}).get("parameters") or {}).get("OutputS3Uri")
    if not output:
        return None, None, "the plan has no fine-tune OutputS3Uri"
    uri = f"{output.rstrip('/')}/{SMOKE_REPORT}"
    try:
        bucket, key = split_s3(uri)
        return dict(json.loads(s3_hook.read_key(key, bucket_name=bucket))), uri, None
    except Exception as err:  # noqa: BLE001 - shown as unknown, never fails the approval step
        log.warning("smoke report %s not read: %s", uri, err)
        return None, uri, f"{type(err).__name__}: {err}"


def package_lines(package: Mapping[str, Any], region: str) -> list[str]:
    """The model package's lines: console link, ARN, status, and the CLI command that decides it."""
    from airflow.providers.amazon.aws.links.base_aws import BaseAwsLink

    from sim2real.orchestration.hooks.model_registry import approve_command
    from sim2real.orchestration.links.s3 import partition_of
    from sim2real.orchestration.links.sagemaker import SageMakerModelPackageLink

    arn = package["ModelPackageArn"]
    url = SageMakerModelPackageLink().format_link(
        region_name=region, aws_domain=BaseAwsLink.get_aws_domain(partition_of(region)),
        group_name=package.get("ModelPackageGroupName") or arn.split("/")[-2], version=arn.rsplit("/", 1)[-1])
    # The request's text is written once: a status here would go stale on the decision, so it is dated as such.
    return [f"**Model package:** [{arn}]({url}) ({package.get('ModelApprovalStatus')} when this request was "
            "written; the decision is this request's answer)",
            f"Deciding in SageMaker Studio or with `{approve_command(arn)}` ends this step too."]


def approval_body(*, plan: Mapping[str, Any], ti: Any, package: Mapping[str, Any], dag_id: str, run_id: str,
                  rounds_entry: RoundsEntry, s3_hook: Any = None, sagemaker_client: Any = None,
                  env: Mapping[str, Any] | None = None) -> str:
    """The approval request's Markdown body (module docstring: what it shows).

    :param plan: the run's plan (``prepare_run``'s output).
    :param ti: the running task instance (its XComs: the stages' outputs).
    :param package: the package's DescribeModelPackage response.
    :param rounds_entry: computes the lineage's ``rounds`` entry (:data:`sim2real.orchestration.lineage.RoundsEntry`).
    :param s3_hook: ``S3Hook`` (default: a new one) for the smoke report and the pictures.
    :param sagemaker_client: for the fine-tune's billed time (default: the SageMaker hook's client).
    :param env: the environment config (default: read it; ``"sandbox": true`` gives presigned links).
    """
    from sim2real.orchestration.links.mlflow import run_url
    from sim2real.orchestration.links.s3 import console_object_url, presigned_get_url, sandbox_endpoint
    from sim2real.orchestration.report import FIGURE_KEYS, _environment, _pull, run_actual_cost, write_figures

    if s3_hook is None:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        s3_hook = S3Hook()
    if sagemaker_client is None:
        try:
            from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

            sagemaker_client = SageMakerHook().conn
        except Exception as err:  # noqa: BLE001 - the fine-tune's cost is then unknown
            log.warning("no SageMaker client for the fine-tune's billed time: %s", err)
    env = _environment() if env is None else env
    params = plan.get("params") or {}
    parts = {key: _pull(ti, task_id) for key, task_id in stage_sources(plan).items()}
    endpoint = sandbox_endpoint(env, s3_hook.get_conn())
    # The retraining rounds so far, this one included (its gate passed: no next round), as the report builds them.
    rounds = rounds_entry(plan, run_id=run_id, evaluation=parts.get("evaluation"), checkpoint=parts.get("checkpoint"),
                          next_run_id=None)
    figures = write_figures(plan=plan, parts={**parts, "rounds": rounds}, hook=s3_hook, endpoint_url=endpoint)
    lineage = build_lineage(run_key=plan["run_key"], dag_id=dag_id, run_id=run_id, params=params, plan=plan,
                            figures=figures, cost_actual=run_actual_cost(plan, parts, ti, sagemaker_client),
                            rounds=rounds, **parts)
    lines = headline(lineage, gate_warnings(params))
    lines[-1] = lines[-1].replace("**GPU cost:**", "**GPU cost so far:**", 1)
    smoke, smoke_uri, smoke_error = read_smoke_report(plan, s3_hook)
    lines.append(smoke_line(smoke, smoke_uri, smoke_error))
    lines += package_lines(package, plan["region"])
    bucket, prefix = plan["bucket"], plan["run_prefix"]
    links, pictures = [], []
    for name, title in FIGURES.items():
        if name not in figures:  # not a picture of this run (success per round: max_rounds 1)
            continue
        entry = figures[name] or {}
        if not entry.get("uri"):
            links.append(f"{title}: not drawn ({entry.get('skipped_reason') or 'unknown reason'})")
            continue
        key = f"{prefix}{FIGURE_KEYS[name]}"
        url = presigned_get_url(s3_hook.get_conn(), bucket, key) if endpoint else console_object_url(
            plan["region"], bucket, key)
        links.append(f"[{title}]({url})")
        if endpoint:
            pictures.append(f"[![{title}]({url})]({url})")  # click: the full-size picture in a tab
    mlflow = run_url(plan.get("tracking"))
    if mlflow:
        links.append(f"[MLflow run]({mlflow})")
    lines += ["", " · ".join(links), *(["", *pictures] if pictures else [])]
    return "\n\n".join(line for line in lines if line) + "\n"
