"""Which field dataset version the GR00T fine-tune includes (form field ``field_dataset_version``).

Resolved once per run, by the resource preflight ``check_resources`` (before the build and any training, so before
any spend; :class:`sim2real.orchestration.operators.preflight.ResourcePreflightOperator`), which hands the result on;
the ``vla.field_dataset`` task gives the pipeline that same version (never resolving ``latest`` again):

* ``null`` (the default): none, except in a run started by a ``sim2real_field_dataset`` asset event
  (:data:`sim2real.orchestration.assets.FIELD_DATASET_ASSET`): the triggering event's version (context
  ``triggering_asset_events``, the newest event when several were queued);
* ``"latest"``: the asset's newest event (``inlet_events[FIELD_DATASET_ASSET]``, the Task SDK's asset events of the
  task's inlet); none published yet fails the task;
* ``"fd-<16 hex>"``: that version, its manifest at ``s3://<bucket>/<prefix>field/datasets/<version>/manifest.json``
  (:func:`sim2real.contract.field.manifest_key`).

Every resolved manifest is checked by the preflight: its URI is the version's key, S3 ``HeadObject`` (a missing manifest
refuses the run with the URI), then ``GetObject`` and the schema (:func:`sim2real.contract.field.dataset_errors`),
which gives the version's episodes and frames. The pipeline gets the manifest's URI as its ``FieldDatasetManifestS3Uri`` parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sim2real.contract import field as contract
from sim2real.contract.storage import MISSING_OBJECT_CODES
from sim2real.orchestration.assets import FIELD_DATASET_ASSET
from sim2real.orchestration.pipelines.groot import FIELD_MANIFEST_PARAMETER

#: The form field and what it accepts (``null`` = none, or the triggering asset event's version).
FORM_FIELD = "field_dataset_version"
LATEST = "latest"
PATTERN = r"^(latest|fd-[0-9a-f]{16})$"
#: The pipeline parameter carrying the resolved manifest's URI ("" = none); declared by ``pipeline_build``.
PIPELINE_PARAMETER = FIELD_MANIFEST_PARAMETER


class FieldDatasetUnavailable(RuntimeError):
    """The field dataset asked for cannot be used (none published, no manifest, an invalid manifest)."""


def _extra(event: Any) -> dict[str, Any]:
    return dict(getattr(event, "extra", None) or {})


def _asset_events(events: Any) -> list[Any]:
    """The field dataset asset's events in a mapping of events by asset (``triggering_asset_events``), or []."""
    if not events:
        return []
    try:
        return list(events[FIELD_DATASET_ASSET])
    except KeyError:
        return []


def _from_event(event: Any, source: str) -> dict[str, Any]:
    extra = _extra(event)
    version, uri = extra.get("dataset_version"), extra.get("manifest_uri")
    if not isinstance(version, str) or not re.fullmatch(PATTERN, version) or version == LATEST or \
            not isinstance(uri, str) or not uri.startswith("s3://"):
        raise FieldDatasetUnavailable(f"the {FIELD_DATASET_ASSET.name} event of {getattr(event, 'timestamp', '?')} "
                                      f"names no field dataset version and manifest URI (extra {extra})")
    return {"dataset_version": version, "manifest_uri": uri, "source": source}


def requested(form_value: str | None, *, bucket: str, prefix: str, triggering_asset_events: Any = None,
              inlet_events: Any = None) -> dict[str, Any] | None:
    """The field dataset version a run asks for, from the form and the run's context (no AWS call).

    :param form_value: the form field (``None`` / ``""``, ``"latest"`` or ``"fd-<16 hex>"``).
    :param bucket: the bucket of the field data; ``prefix``: its key prefix (``""`` or ending in ``/``).
    :param triggering_asset_events: the context's ``triggering_asset_events`` (asset → events, oldest first).
    :param inlet_events: the context's ``inlet_events`` (the task has ``FIELD_DATASET_ASSET`` among its inlets).
    :return: ``{"dataset_version", "manifest_uri", "source"}`` (``source``: ``asset_event`` | ``latest`` |
        ``explicit``), or ``None`` when no field dataset is asked for.
    :raises FieldDatasetUnavailable: ``"latest"`` with no published version, an event without a version.
    :raises ValueError: a form value that is not ``latest`` or ``fd-<16 hex>``.
    """
    if not form_value:
        events = _asset_events(triggering_asset_events)
        return _from_event(events[-1], "asset_event") if events else None
    if not re.fullmatch(PATTERN, form_value):
        raise ValueError(f"{FORM_FIELD} {form_value!r} is not 'latest' or 'fd-' and 16 hex digits")
    if form_value == LATEST:
        events = list(inlet_events[FIELD_DATASET_ASSET]) if inlet_events is not None else []
        if not events:
            raise FieldDatasetUnavailable(f"{FORM_FIELD} 'latest': no field dataset version is published yet (no "
                                          f"{FIELD_DATASET_ASSET.name} asset event)")
        return _from_event(events[-1], "latest")
    return {"dataset_version": form_value, "manifest_uri": f"s3://{bucket}/{contract.manifest_key(prefix, form_value)}",
            "source": "explicit"}


#: S3 error codes of ``HeadObject`` that mean the caller may not read the key (Amazon S3 API Reference, "HeadObject").
_DENIED = ("403", "AccessDenied", "Forbidden")


def check_manifest(s3_client: Any, wanted: Mapping[str, Any], *, bucket: str, prefix: str) -> dict[str, Any]:
    """Check a requested version's manifest in S3 and return the fine-tune's field dataset entry.

    Checks that the manifest URI is exactly ``s3://<bucket>/<prefix>field/datasets/<version>/manifest.json``
    (:func:`sim2real.contract.field.manifest_key`; an asset event may name any URI), then calls S3 ``HeadObject``
    (the manifest exists) and ``GetObject`` through :func:`sim2real.orchestration.field_dataset.read_manifest`
    (JSON, the schema, the version asked for and its own key).

    :param s3_client: a boto3 S3 client (``s3:GetObject`` on the manifest; ``HeadObject`` needs it too).
    :param wanted: :func:`requested`'s value.
    :param bucket: the bucket of the field data; ``prefix``: its key prefix (``""`` or ending in ``/``).
    :return: ``{"dataset_version", "manifest_uri", "episodes", "frames", "source"}``.
    :raises FieldDatasetUnavailable: a URI that is not the version's key, no manifest there (``HeadObject`` 404),
        another S3 error (its code named: 403 is an access denial, not a missing manifest), a body that is not
        JSON, an invalid manifest or one of another version.
    """
    from botocore.exceptions import ClientError

    from sim2real.orchestration.field_dataset import FieldDatasetError, read_manifest

    uri, version = wanted["manifest_uri"], wanted["dataset_version"]
    key = contract.manifest_key(prefix, version)
    expected = f"s3://{bucket}/{key}"
    if uri != expected:
        raise FieldDatasetUnavailable(f"field dataset version {version}: its manifest URI {uri} is not {expected} "
                                      "(where this run's field data keeps that version)")
    try:
        s3_client.head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "?")
        if code in MISSING_OBJECT_CODES:
            why = f"no manifest at {uri} (HeadObject {code})"
        elif code in _DENIED:
            why = f"the Airflow role may not read {uri} (HeadObject {code}: it needs s3:GetObject on it)"
        else:
            why = f"S3 did not answer for {uri} (HeadObject {code})"
        raise FieldDatasetUnavailable(f"field dataset version {version}: {why}") from err
    try:
        document = read_manifest(s3_client, uri, version)
    except (FieldDatasetError, contract.FieldEpisodeError) as err:
        raise FieldDatasetUnavailable(f"field dataset version {version}: the manifest {uri} is not valid: {err}") \
            from err
    except ClientError as err:
        raise FieldDatasetUnavailable(f"field dataset version {version}: GetObject {uri} failed "
                                      f"({err.response.get('Error', {}).get('Code', '?')})") from err
    return {"dataset_version": version, "manifest_uri": uri, "episodes": document["totals"]["episodes"],
            "frames": document["totals"]["frames"], "source": wanted["source"]}


def resolve(form_value: str | None, s3_client: Any, *, bucket: str, prefix: str, triggering_asset_events: Any = None,
            inlet_events: Any = None) -> dict[str, Any] | None:
    """:func:`requested` then :func:`check_manifest`: the fine-tune's field dataset, or ``None`` (none asked for).

    :raises FieldDatasetUnavailable: as both.
    """
    wanted = requested(form_value, bucket=bucket, prefix=prefix, triggering_asset_events=triggering_asset_events,
                       inlet_events=inlet_events)
    return check_manifest(s3_client, wanted, bucket=bucket, prefix=prefix) if wanted else None


def preflight_check(vla: Mapping[str, Any], s3_client: Any, context: Mapping[str, Any], problems: list[str],
                    checked: list[str]) -> dict[str, Any] | None:
    """The resource preflight's check of the fine-tune's field dataset (``check_resources``'s
    ``field_dataset_check``): :func:`resolve` with the task's context, before any spend.

    :param vla: the plan's ``vla`` section (``field_dataset_version``, ``field_bucket``, ``field_prefix``).
    :param s3_client: a boto3 S3 client. ``context``: the task's context (``triggering_asset_events``,
        ``inlet_events``: the task has the field dataset asset among its inlets).
    :param problems: gets one problem (what is wrong and what to do) when the version cannot be used;
        ``checked``: gets the version checked.
    :return: :func:`check_manifest`'s entry, or ``None`` (none asked for, or a problem).
    """
    try:
        entry = resolve(vla.get("field_dataset_version"), s3_client, bucket=vla["field_bucket"],
                        prefix=vla.get("field_prefix") or "",
                        triggering_asset_events=context.get("triggering_asset_events"),
                        inlet_events=context.get("inlet_events"))
    except (FieldDatasetUnavailable, ValueError) as err:
        problems.append(f"{err}. Publish it (DAG sim_to_real_field_data) or set {FORM_FIELD} in the form to a "
                        "published version ('latest' or fd- and 16 hex digits), or leave it empty for none; "
                        "run_vla_finetune off skips the fine-tune")
        return None
    if entry:
        checked.append(f"field dataset {entry['dataset_version']} ({entry['manifest_uri']})")
    return entry
