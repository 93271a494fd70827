"""Step function of the canary's field episode wait: are there enough episode objects to judge the canary yet?

A response is ``{"listed": {thing name: number of objects}}``: the keys under each canary robot's
``<prefix>field/episodes/<thing>/`` uploaded since the window's start (S3 ListObjectsV2 ``Contents[].LastModified``,
every page; the layout of
:mod:`sim2real.contract.field`); or a botocore error response. The wait only counts objects: the task reads and
checks them when the wait ends (:func:`sim2real.orchestration.field.collect_field_episodes`) and decides
(:func:`sim2real.orchestration.field.canary_verdict`). Source: Amazon S3 API Reference, ListObjectsV2
(``Contents[].LastModified``, ``IsTruncated``, ``NextContinuationToken``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.contract.field import episodes_prefix
from sim2real.orchestration.waits.core import Step, WaitState, api_error_step


def canary_episodes_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one listing of the canary robots' episode objects.

    Params: ``bucket``, ``prefix``, ``thing_names``, ``min_episodes`` (objects needed), ``window_end`` (epoch
    seconds: the canary window's end), ``keys_read`` (objects the task already read and found too few: the wait
    ends again only on a new one).

    :return: ``success`` with ``window_over`` False when at least ``min_episodes`` objects are listed, at least one
        per canary robot, and more than ``keys_read``; ``success`` with ``window_over`` True once ``state.now`` has
        reached ``window_end`` (the task judges what is there); ``failure`` on a non-retriable API error (e.g.
        AccessDenied); ``retry`` otherwise (throttling included). Payload: ``listed`` (thing -> objects),
        ``window_over``.
    """
    params = state.params
    where = f"s3://{params['bucket']}/{episodes_prefix(params['prefix'])}"
    error = api_error_step(response, f"the canary's field episodes under {where}", "ListObjectsV2")
    if error is not None:
        return error
    listed = {thing: int((response.get("listed") or {}).get(thing) or 0) for thing in sorted(params["thing_names"])}
    total, needed = sum(listed.values()), int(params["min_episodes"])
    silent = [thing for thing, n in listed.items() if not n]
    counts = ", ".join(f"{thing}: {n}" for thing, n in listed.items())
    if state.now >= float(params["window_end"]):
        return Step("success", f"the canary window is over: {total} episode object(s) under {where} ({counts})",
                    {"listed": listed, "window_over": True})
    if total >= needed and not silent and total > int(params.get("keys_read") or 0):
        return Step("success", f"{total} episode object(s) under {where}, {needed} needed in all, at least one from every canary robot "
                               f"({counts}): reading them", {"listed": listed, "window_over": False})
    missing = f"; no object yet from {', '.join(silent)}" if silent else ""
    return Step("retry", f"canary field episodes: {total} object(s) of {needed} under {where} ({counts}){missing}",
                {"listed": listed, "window_over": False})
