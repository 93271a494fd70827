"""Console link for the run folder ``s3://<bucket>/runs/<run_key>/`` (S3 console URL layout:
``/s3/buckets/<bucket>?region=<region>&prefix=<prefix>&showversions=false``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink

from sim2real.orchestration.links import nothing_persisted, record_push


def partition_of(region: str) -> str:
    """AWS partition of ``region`` (``aws``, ``aws-cn``, ``aws-us-gov``)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


class S3RunFolderLink(BaseAwsLink):
    """Link to the run's folder in the artifacts bucket (checkpoints, TensorBoard events, eval, lineage)."""

    name = "S3 run folder"
    key = "sim2real_s3_run_folder"
    format_str = BASE_AWS_CONSOLE_LINK + "/s3/buckets/{bucket}?region={region_name}&prefix={prefix}&showversions=false"

    def format_link(self, **kwargs) -> str:
        if "prefix" in kwargs:
            kwargs["prefix"] = quote(kwargs["prefix"], safe="")
        return super().format_link(**kwargs)

    @classmethod
    def persist_for_plan(cls, context: Mapping[str, Any], plan: Mapping[str, Any]) -> None:
        """Persist the link of ``plan``'s run folder for the running task (``plan``: ``plan_run``'s output)."""
        cls.persist(context=context, operator=context["task"], region_name=plan["region"],
                    aws_partition=partition_of(plan["region"]), bucket=plan["bucket"], prefix=plan["run_prefix"])


class S3ObjectLink(BaseAwsLink):
    """Link to one object of the artifacts bucket in the S3 console (its overview page, with Open and
    Download). S3 console URL layout: ``/s3/object/<bucket>?region=<region>&prefix=<key>``.

    Subclasses name the object; the operator persists ``bucket`` and ``key`` (no link when it did not).
    In the local sandbox (no console) the operator persists ``url`` instead: a presigned GET URL of the
    object on the sandbox's S3 (127.0.0.1; the bucket is private, an unsigned GET is refused), which the
    browser opens directly.
    """

    format_str = BASE_AWS_CONSOLE_LINK + "/s3/object/{bucket}?region={region_name}&prefix={key}"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The provider's lookup, skipped when the running task persisted no such picture (not drawn: no
        ``XCom not found`` in its log; :func:`sim2real.orchestration.links.nothing_persisted`)."""
        if nothing_persisted(ti_key, self.key):
            return ""
        return super().get_link(operator, ti_key=ti_key)

    def format_link(self, **kwargs) -> str:
        if kwargs.get("url"):
            return kwargs["url"]
        if "key" in kwargs:
            kwargs["key"] = quote(kwargs["key"], safe="")
        return super().format_link(**kwargs)

    @classmethod
    def persist_for_object(cls, ti: Any, plan: Mapping[str, Any], key: str, *, url: str | None = None) -> None:
        """Persist the link of ``s3://<plan bucket>/<key>`` for the running task instance ``ti``
        (``plan``: ``prepare_run``'s output, for the bucket and region). ``url``: in the sandbox, the object's
        presigned URL there (:func:`presigned_get_url`); ``None`` on AWS (the S3 console page)."""
        extra = {"url": url} if url else {}
        cls.persist(context={"ti": ti}, operator=ti.task, region_name=plan["region"],
                    aws_partition=partition_of(plan["region"]), bucket=plan["bucket"], key=key, **extra)
        record_push(ti, cls.key)


def console_object_url(region: str, bucket: str, key: str) -> str:
    """The S3 console page of ``s3://<bucket>/<key>`` (the URL :class:`S3ObjectLink` renders)."""
    return S3ObjectLink.format_str.format(aws_domain=BaseAwsLink.get_aws_domain(partition_of(region)),
                                          bucket=bucket, region_name=region, key=quote(key, safe=""))


#: Longest validity of a SigV4 presigned URL (S3 User Guide, "Sharing objects with presigned URLs"): 7 days.
PRESIGNED_MAX_S = 7 * 24 * 3600


def presigned_get_url(s3_client: Any, bucket: str, key: str, expires_s: int = PRESIGNED_MAX_S) -> str:
    """A presigned ``GetObject`` URL of ``s3://<bucket>/<key>`` (botocore ``generate_presigned_url``)."""
    return s3_client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)


def sandbox_endpoint(env: Mapping[str, Any], s3_client: Any) -> str | None:
    """The S3 endpoint of the local sandbox (the client's ``meta.endpoint_url``) when the environment config
    says ``"sandbox": true``; ``None`` on AWS, where the console links are the way in."""
    if not env.get("sandbox"):
        return None
    return getattr(getattr(s3_client, "meta", None), "endpoint_url", None)


class S3TrainingCurveLink(S3ObjectLink):
    """The run report's training curve PNG (``runs/<run_key>/report/training_curve.png``)."""

    name = "Training curve"
    key = "sim2real_s3_training_curve"


class S3EvalOutcomeLink(S3ObjectLink):
    """The run report's evaluation outcome PNG (``runs/<run_key>/report/eval_outcome.png``)."""

    name = "Evaluation outcome"
    key = "sim2real_s3_eval_outcome"


class S3RoundSuccessLink(S3ObjectLink):
    """The run report's success rate per retraining round PNG (``runs/<run_key>/report/round_success.png``;
    only for ``max_rounds`` > 1)."""

    name = "Success rate per round"
    key = "sim2real_s3_round_success"


class S3SimVsFieldLink(S3ObjectLink):
    """The run report's simulation vs field success rate PNG (``runs/<run_key>/report/sim_vs_field.png``; only for
    a run with a canary)."""

    name = "Simulation vs field"
    key = "sim2real_s3_sim_vs_field"


#: lineage ``figures`` key → the extra link of that picture (write_lineage persists them; write_lineage and the
#: plugin declare every one).
FIGURE_LINKS: dict[str, type[S3ObjectLink]] = {
    "training_curve": S3TrainingCurveLink,
    "eval_outcome": S3EvalOutcomeLink,
    "round_success": S3RoundSuccessLink,
    "sim_vs_field": S3SimVsFieldLink,
}
