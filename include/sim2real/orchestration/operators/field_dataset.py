"""Publish the next version of the field dataset and announce it as the asset ``sim2real_field_dataset``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from sim2real.orchestration.assets import FIELD_DATASET_ASSET, _run_key, field_dataset_extra

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Refusals named one by one in the task log (the counts cover every one).
LOGGED_REFUSALS = 50


class FieldDatasetPublishOperator(AwsBaseOperator[S3Hook]):
    """Build the next field dataset version from S3, publish it and announce it, when enough episodes are new.

    The previous version is the asset's latest event (``inlet_events[FIELD_DATASET_ASSET]``, its extra's
    ``dataset_version`` and ``manifest_uri``; the manifest is read back and checked). The new version is
    :func:`sim2real.orchestration.field_dataset.build_manifest` (``ListObjectsV2``, ``GetObject``, ``HeadObject``
    with ``ChecksumMode=ENABLED``); with at least ``min_new_episodes`` episodes not in the previous version it is
    written once (:func:`~sim2real.orchestration.field_dataset.publish_manifest`, ``PutObject`` with
    ``IfNoneMatch="*"``: a version already written is kept, not an error) and the task's outlet event gets
    :func:`sim2real.orchestration.assets.field_dataset_extra`. Airflow emits the event only when the task succeeds.

    :param bucket: the bucket the robots upload to (templated); None: the environment config's
        ``artifacts_bucket`` (``com.sim2real.FieldUploader``'s ``FieldBucket``).
    :param prefix: the robots' key prefix, ``""`` or ending in ``/`` (templated).
    :param min_new_episodes: new episodes a version needs, an integer >= 1 (templated); None: the environment
        config's ``field_data.min_new_episodes`` (:data:`sim2real.orchestration.config.FIELD_DATA_DEFAULTS`).
    :return: the event's extra and ``refused`` (``{reason: count}``) and ``written`` (False: the version was
        already in S3).
    :raises AirflowSkipException: fewer new episodes than needed (``"N new episodes, M needed"``): no write, no event.
    :raises AirflowFailException: (not retried) a run conf key that is not a param of the DAG, a threshold that
        is not an integer >= 1, a latest event without
        ``dataset_version`` / ``manifest_uri`` or whose manifest is not that version, or an episode of the
        previous version that is gone or changed (each named).
    """

    aws_hook_class = S3Hook
    template_fields: Sequence[str] = aws_template_fields("bucket", "prefix", "min_new_episodes")

    def __init__(self, *, bucket: str | None = None, prefix: str = "", min_new_episodes: int | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("inlets", [FIELD_DATASET_ASSET])
        kwargs.setdefault("outlets", [FIELD_DATASET_ASSET])
        super().__init__(**kwargs)
        self.bucket, self.prefix, self.min_new_episodes = bucket, prefix, min_new_episodes

    def _settings(self) -> tuple[str, int]:
        """The bucket and the threshold, from the arguments or the environment config (read at run time)."""
        from sim2real.orchestration.config import field_data_settings, load_environment, min_new_episodes_problem

        bucket, threshold = self.bucket, self.min_new_episodes
        if not bucket or threshold is None:
            env = load_environment()
            bucket = bucket or env["artifacts_bucket"]
            if threshold is None:
                threshold = field_data_settings(env)["min_new_episodes"]
        if isinstance(threshold, str) and threshold.strip().isdigit():
            threshold = int(threshold)
        problem = min_new_episodes_problem(threshold, "min_new_episodes")
        if problem:
            raise AirflowFailException(problem)
        return bucket, threshold

    def _parent(self, context: Context) -> dict[str, Any] | None:
        """The manifest of the asset's latest event (None: no version yet)."""
        from sim2real.orchestration.field_dataset import FieldDatasetError, read_manifest

        events = list(context["inlet_events"][FIELD_DATASET_ASSET].ascending(False).limit(1))
        if not events:
            self.log.info("No %s event yet: this is the first version", FIELD_DATASET_ASSET.name)
            return None
        extra = events[0].extra or {}
        if not extra.get("dataset_version") or not extra.get("manifest_uri"):
            raise AirflowFailException(
                f"the latest {FIELD_DATASET_ASSET.name} event ({events[0].timestamp}, from "
                f"{events[0].source_dag_id or 'outside a DAG'}) has no dataset_version / manifest_uri in its extra "
                f"{extra!r}: the previous version is unknown")
        try:
            return read_manifest(self.hook, extra["manifest_uri"], extra["dataset_version"])
        except (FieldDatasetError, ValueError) as err:
            raise AirflowFailException(f"the previous version of the latest {FIELD_DATASET_ASSET.name} event: "
                                       f"{err}") from err

    def execute(self, context: Context) -> dict[str, Any]:
        from sim2real.orchestration.field_dataset import FieldDatasetError, build_manifest, publish_manifest

        from sim2real.orchestration.params import ParamRuleError, check_conf_keys

        dag_run, dag = context.get("dag_run"), context.get("dag")
        try:  # a typo'd conf key (min_new_episode) would otherwise run on the default threshold
            check_conf_keys(getattr(dag_run, "conf", None), getattr(dag, "params", None) or {})
        except ParamRuleError as err:
            raise AirflowFailException(str(err)) from err
        bucket, threshold = self._settings()
        parent = self._parent(context)
        try:
            build = build_manifest(self.hook, bucket, self.prefix, parent=parent)
        except FieldDatasetError as err:
            raise AirflowFailException(f"the field dataset cannot grow from {parent['dataset_version']}: "
                                       f"{err}") from err
        manifest = build.manifest
        totals = manifest["totals"]
        self.log.info("Field dataset %s: %d episodes (%d new since %s), %d frames, refused %s",
                      manifest["dataset_version"], totals["episodes"], totals["new_episodes"],
                      manifest["parent_version"] or "nothing", totals["frames"], manifest["refused"])
        for key, reason, detail in build.refusals[:LOGGED_REFUSALS]:
            self.log.info("refused %s (%s): %s", key, reason, detail)
        if totals["new_episodes"] < threshold:
            raise AirflowSkipException(
                f"{totals['new_episodes']} new episodes, {threshold} needed: no new field dataset version (the "
                f"latest stays {manifest['parent_version'] or 'none'})")
        uri, written = publish_manifest(self.hook, manifest)
        self.log.info("%s %s", "Wrote" if written else "Already published (412 Precondition Failed), kept:", uri)
        extra = field_dataset_extra(manifest, uri, _run_key(context))
        events = context.get("outlet_events")
        if events is not None:
            events[FIELD_DATASET_ASSET].extra.update(extra)
        return {**extra, "refused": manifest["refused"], "written": written}
