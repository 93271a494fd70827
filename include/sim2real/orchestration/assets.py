"""Metadata on the DAG's Airflow Asset events (what a downstream DAG or the Assets view sees).

Each producing task attaches an ``extra`` to its outlet's event through ``outlet_events``:

- ``sim2real_rl_checkpoint`` (``checkpoint.wait_for_checkpoint``): checkpoint URI + sha256, task,
  iteration, mean reward;
- ``sim2real_eval_report`` (``evaluate.read_eval_report``): success rate, its 95% interval, episodes,
  the evaluated checkpoint's sha256, the report URI;
- ``sim2real_approved_model_package`` (``vla.wait_for_approval``): model package ARN, model data URI,
  approval status;
- ``sim2real_deployed_model_package`` (``deploy.deploy_to_robots`` here, ``deploy_to_robots`` in
  ``sim_to_real_release``): model package ARN, deployment id, thing group, each device's status. Airflow
  emits an outlet's event only when its task succeeds: a skipped or failed deployment emits none.
- ``sim2real_field_dataset`` (``publish_field_dataset`` in ``sim_to_real_field_data``): the field dataset
  version and its manifest (:func:`field_dataset_extra`); the task ends skipped, with no event, below its
  threshold of new episodes. ``sim_to_real`` is scheduled on it (or on its nightly time).

Every extra carries the ``run_key``. Operators and sensors get it through their ``post_execute``
hook (which receives the task's return value, after a deferral too); TaskFlow tasks set it in their body.

The checkpoint event is announced once per checkpoint sha256 and DAG run (:func:`announce_once`): a cleared or
retried ``wait_for_checkpoint`` that finds the same checkpoint again emits no second event, so a DAG scheduled on
the asset does not run twice for it. A static Asset outlet always emits when its task succeeds (Airflow 3.3.1,
``TaskInstance.register_asset_changes_in_db``), so the sensor's outlet (and inlet) is the asset alias
``sim2real_rl_checkpoint_announcements``, through which the event reaches ``sim2real_rl_checkpoint`` only when it
is added at run time (``outlet_events[alias].add(asset, extra=...)``, Airflow's documented way to emit an event
decided at run time); the alias's events already recorded for this run are read through ``inlet_events``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset, AssetAlias

log = logging.getLogger(__name__)

#: A new version of the field dataset (``sim2real.contract.field``, schema ``field_dataset``), published by the
#: ``sim_to_real_field_data`` DAG once enough new field episodes with recorded data arrived. Its event's extra
#: (:func:`field_dataset_extra`, :data:`FIELD_DATASET_EXTRA_KEYS`): ``run_key`` (the publishing run's),
#: ``dataset_version`` (``fd-`` + 16 hex), ``manifest_uri`` (``s3://<bucket>/<prefix>field/datasets/<version>/
#: manifest.json``), ``episodes`` and ``frames`` (the version's totals), ``new_episodes`` (not in the parent) and
#: ``parent_version`` (the version it grew from; null for the first). The asset's latest event is the latest
#: version: the publisher's next version grows from it, a reader resolves a version through it.
FIELD_DATASET_ASSET = Asset(name="sim2real_field_dataset", uri="sim2real://field/dataset")
#: Updated by ``wait_for_checkpoint`` (checkpoint URI and sha256 on the event).
CHECKPOINT_ASSET = Asset(name="sim2real_rl_checkpoint", uri="sim2real://rl/checkpoint")
#: The checkpoint sensor's outlet and inlet: its ``sim2real_rl_checkpoint`` event goes through this alias, added at
#: run time once per checkpoint sha256 and run (:func:`announce_once`).
CHECKPOINT_ANNOUNCEMENTS = AssetAlias(name="sim2real_rl_checkpoint_announcements")


def checkpoint_extra(manifest: Mapping[str, Any] | None, run_key: str | None = None) -> dict[str, Any]:
    """Event extra of the RL checkpoint asset, from the verified manifest."""
    m = manifest or {}
    extra = {
        "run_key": run_key or m.get("run_key"),
        "checkpoint_uri": m.get("checkpoint_uri"),
        "sha256": m.get("sha256"),
        "task": m.get("task"),
        "iteration": m.get("iteration"),
        "mean_reward": m.get("mean_reward"),
    }
    return {k: v for k, v in extra.items() if v is not None}


def eval_report_extra(report: Mapping[str, Any] | None, run_key: str | None = None) -> dict[str, Any]:
    """Event extra of the evaluation report asset."""
    r = report or {}
    extra = {
        "run_key": run_key,
        "success_rate": r.get("success_rate"),
        "ci95": r.get("ci95"),
        "episodes": r.get("episodes"),
        "checkpoint_sha256": r.get("checkpoint_sha256"),
        "report_uri": r.get("report_uri"),
    }
    return {k: v for k, v in extra.items() if v is not None}


def model_package_extra(approval: Mapping[str, Any] | None, run_key: str | None = None) -> dict[str, Any]:
    """Event extra of the approved model package asset."""
    a = approval or {}
    extra = {
        "run_key": run_key,
        "model_package_arn": a.get("model_package_arn"),
        "model_data_url": a.get("model_data_url"),
        "approval_status": a.get("approval_status"),
    }
    return {k: v for k, v in extra.items() if v is not None}


#: The keys of the field dataset event's extra, in order (:func:`field_dataset_extra`).
FIELD_DATASET_EXTRA_KEYS = ("run_key", "dataset_version", "manifest_uri", "episodes", "frames", "new_episodes",
                            "parent_version")


def field_dataset_extra(manifest: Mapping[str, Any], manifest_uri: str, run_key: str | None = None) -> dict[str, Any]:
    """Event extra of the field dataset asset, from a published manifest (schema ``field_dataset``): every key of
    :data:`FIELD_DATASET_EXTRA_KEYS`; ``run_key`` left out when None, ``parent_version`` kept (null: the first)."""
    extra = {"run_key": run_key, "dataset_version": manifest["dataset_version"], "manifest_uri": manifest_uri,
             "episodes": manifest["totals"]["episodes"], "frames": manifest["totals"]["frames"],
             "new_episodes": manifest["totals"]["new_episodes"], "parent_version": manifest["parent_version"]}
    return {k: v for k, v in extra.items() if v is not None or k == "parent_version"}


def _set_outlet_extra(context: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    task = context.get("task")
    events = context.get("outlet_events")
    if task is None or events is None:
        return
    for asset in getattr(task, "outlets", None) or []:
        events[asset].extra.update(extra)


def _run_key(context: Mapping[str, Any]) -> str | None:
    task = context.get("task")
    key = getattr(task, "run_key", None)
    if isinstance(key, str) and key:
        return key
    dag_run = context.get("dag_run")
    if dag_run is None:
        return None
    from sim2real.contract.run_key import make_run_key

    return make_run_key(dag_run.dag_id, dag_run.run_id)


def _earlier_announcement(context: Mapping[str, Any], alias: Any, key: str, value: Any) -> Any:
    """The event of ``alias`` this DAG run already recorded with ``extra[key] == value`` (an earlier try), or None.

    Reads the alias's events through the Task SDK (``inlet_events[alias]``, the Execution API's asset events by
    alias), from the earliest of the run's logical date and ``run_after`` on (no event of this run is older).
    """
    dag_run = context.get("dag_run")
    inlet_events = context.get("inlet_events")
    if dag_run is None or inlet_events is None:
        return None
    accessor = inlet_events[alias]
    dates = [d for d in (getattr(dag_run, "logical_date", None), getattr(dag_run, "run_after", None)) if d]
    if dates:
        accessor = accessor.after(min(dates))
    for event in accessor:
        if (event.source_dag_id == dag_run.dag_id and event.source_run_id == dag_run.run_id
                and (event.extra or {}).get(key) == value):
            return event
    return None


def announce_once(context: Mapping[str, Any], alias: Any, asset: Any, extra: Mapping[str, Any], *,
                  key: str = "sha256") -> bool:
    """Emit ``asset``'s event through ``alias`` with ``extra``, unless this DAG run already did for ``extra[key]``.

    :param context: the task's context; its task has ``alias`` among its outlets and its inlets.
    :param alias: the task's ``AssetAlias`` outlet.
    :param asset: the ``Asset`` the event is for.
    :param extra: the event's extra; ``extra[key]`` identifies what is announced (the checkpoint's sha256).
    :return: True when the event is added, False when an earlier try of this run announced the same value (or the
        context has no ``outlet_events``).
    """
    events = context.get("outlet_events")
    if events is None:
        return False
    value = extra.get(key)
    earlier = _earlier_announcement(context, alias, key, value) if value is not None else None
    if earlier is not None:
        log.info("%s %s=%s was already announced by this run (%s, try of %s): no second asset event", asset.name,
                 key, value, earlier.source_task_id, earlier.timestamp)
        return False
    events[alias].add(asset, extra=dict(extra))
    return True


def checkpoint_post_execute(context: Mapping[str, Any], result: Any = None) -> None:
    """``post_execute`` of the checkpoint sensor: the ``sim2real_rl_checkpoint`` event with the manifest's URI and
    sha256, once per sha256 and run (:func:`announce_once`)."""
    announce_once(context, CHECKPOINT_ANNOUNCEMENTS, CHECKPOINT_ASSET,
                  checkpoint_extra(result if isinstance(result, Mapping) else None, _run_key(context)))


def model_package_post_execute(context: Mapping[str, Any], result: Any = None) -> None:
    """``post_execute`` of the approval sensor: the approved package on the asset event."""
    _set_outlet_extra(context, model_package_extra(result if isinstance(result, Mapping) else None,
                                                   _run_key(context)))


def set_eval_report_extra(outlet_events: Any, asset: Any, report: Mapping[str, Any], run_key: str) -> None:
    """From the body of ``read_eval_report``: the success rate on the asset event."""
    outlet_events[asset].extra.update(eval_report_extra(report, run_key))


#: The deployed model package (both DAGs that deploy emit it: ``sim_to_real`` and ``sim_to_real_release``).
def deployed_model_extra(result: Mapping[str, Any] | None, run_key: str | None = None, *,
                         thing_group_name: str | None = None) -> dict[str, Any]:
    """Event extra of the deployed-model-package asset, from the deployment operator's result
    (``model_package_arn``, ``deployment_id``, ``devices``: core device → status)."""
    r = result or {}
    extra = {
        "run_key": run_key,
        "model_package_arn": r.get("model_package_arn"),
        "deployment_id": r.get("deployment_id"),
        "thing_group_name": thing_group_name or r.get("thing_group_name"),
        "devices": r.get("devices"),
    }
    return {k: v for k, v in extra.items() if v is not None}


def deployed_model_post_execute(context: Mapping[str, Any], result: Any = None) -> None:
    """``post_execute`` of ``sim_to_real``'s deployment: package, deployment id and devices on the asset event."""
    task = context.get("task")
    _set_outlet_extra(context, deployed_model_extra(result if isinstance(result, Mapping) else None,
                                                    _run_key(context),
                                                    thing_group_name=getattr(task, "thing_group_name", None)))
