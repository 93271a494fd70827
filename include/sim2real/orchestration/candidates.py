"""Sweeps: one DAG run trains several candidate policies (the form's ``sweep`` field) and the best one goes on.

The ``sweep`` field is either

* a list of overrides, one candidate each: ``[{"seed": 3}, {"seed": 4, "num_envs": 64}]``; or
* a grid: ``{"seed": [3, 4], "num_envs": [32, 64]}`` → every combination (4 candidates), in the order of
  :func:`itertools.product` over the keys as written.

Each override is applied over the run's own params, so ``{}`` is a candidate with the form's values. Only the
training hyper-parameters of the form may vary (:data:`SWEEP_KEYS`); each value is checked against that field's
JSON schema (types and ranges), exactly as the trigger form checks the field itself. A sweep has at most
:data:`MAX_CANDIDATES` candidates and no two candidates with the same resulting params. ``null`` or ``[]``: no
sweep, the run trains one policy as without this field.

Which candidate goes on (:func:`best_candidate`): the highest Wilson 95% lower bound of its closed-loop success
rate; ties go to the higher success rate, then to the lower candidate index (the order of the ``sweep`` field),
so the pick is deterministic. A candidate runs as the map index of the sweep group's tasks
(:data:`CANDIDATE_TASKS`; its training: :func:`training_task_id`); the first of them that failed is its cause
(:func:`failed_candidate`).

Pure functions (no Airflow, no AWS): the planner, the DAG's ``pick_best`` task and the tests share them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.params import param_problem
from sim2real.orchestration.run_state import FAILED_STATES

#: The form fields a candidate may override: the training hyper-parameters the trainer reads
#: (:func:`sim2real.orchestration.stages.train.training_environment`). Not ``task`` (candidates compete on one
#: success rate, of one task, and the gate's threshold is per task) and not ``num_nodes`` (the capacity
#: preflight sizes the quota for ``sweep_max_parallel`` jobs of the form's ``num_nodes``).
SWEEP_KEYS = ("seed", "num_envs", "max_iterations", "train_time_budget_seconds")
#: Most candidates of one run (each is a training job and a closed-loop evaluation).
MAX_CANDIDATES = 16


def candidate_id(index: int) -> str:
    """``c0``, ``c1``, …: the candidate's suffix (run key ``<run_key>-c<i>``, prefix ``runs/<run_key>/candidates/c<i>/``)."""
    return f"c{int(index)}"


def candidate_index(cid: str) -> int:
    """The map index of candidate ``cid`` (``c<i>`` → ``i``; the inverse of :func:`candidate_id`).

    :raises ValueError: ``cid`` is not ``c`` followed by a non-negative integer.
    """
    if not (isinstance(cid, str) and cid.startswith("c") and cid[1:].isdigit() and cid[1:].isascii()):
        raise ValueError(f"not a candidate id (c<i>): {cid!r}")
    return int(cid[1:])


def expand_sweep(sweep: Any) -> list[dict[str, Any]]:
    """The sweep field as a list of overrides (one dict per candidate), without checking the values.

    :param sweep: ``None``, a list of objects, or a grid object ``{key: [values]}``.
    :return: ``[]`` for no sweep (``None``, ``[]``, ``{}``); the list as given; or the grid's combinations.
    :raises ValueError: the field is neither (the message names what is accepted).
    """
    if sweep is None:
        return []
    if isinstance(sweep, Mapping):
        if not sweep:
            return []
        keys = list(sweep)
        for key in keys:
            if not isinstance(sweep[key], list) or not sweep[key]:
                raise ValueError(f"sweep grid key {key!r} needs a non-empty list of values, got {sweep[key]!r}")
        return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(sweep[k] for k in keys))]
    if isinstance(sweep, list):
        for i, item in enumerate(sweep):
            if not isinstance(item, Mapping):
                raise ValueError(f"sweep[{i}] must be an object of overrides such as {{\"seed\": 3}}, got {item!r}")
        return [dict(item) for item in sweep]
    raise ValueError("sweep must be a list of overrides ([{\"seed\": 3}, {\"seed\": 4}]) or a grid "
                     f"({{\"seed\": [3, 4]}}), got {type(sweep).__name__}")


def sweep_errors(sweep: Any, params: Mapping[str, Any], specs: Mapping[str, Any]) -> list[str]:
    """Every reason the sweep field is refused (empty when it is valid or absent).

    :param sweep: the ``sweep`` param.
    :param params: the run's params (the candidates' base).
    :param specs: the form's ``Param`` objects by name (their ``resolve`` checks a value against the schema).
    :return: one sentence per problem: not a list or grid, more than :data:`MAX_CANDIDATES` candidates, a key that
        may not vary (with the keys that may), a value its field refuses (the JSON schema's message), two candidates
        with the same params.
    """
    try:
        overrides = expand_sweep(sweep)
    except ValueError as err:
        return [str(err)]
    errors: list[str] = []
    if len(overrides) > MAX_CANDIDATES:
        errors.append(f"sweep has {len(overrides)} candidates, at most {MAX_CANDIDATES} are allowed")
        return errors
    seen: dict[str, int] = {}
    for i, override in enumerate(overrides):
        bad_keys = [k for k in override if k not in SWEEP_KEYS]
        for key in bad_keys:
            errors.append(f"sweep candidate {i} overrides {key!r}, which a sweep may not vary (allowed: "
                          f"{', '.join(SWEEP_KEYS)})")
        for key, value in override.items():
            if key in bad_keys:
                continue
            problem = param_problem(key, value, specs[key])
            if problem:
                errors.append(f"sweep candidate {i}: {problem}")
        resolved = candidate_params(params, override)
        fingerprint = json.dumps({k: resolved.get(k) for k in SWEEP_KEYS}, sort_keys=True)
        if fingerprint in seen:
            errors.append(f"sweep candidates {seen[fingerprint]} and {i} have the same params "
                          f"({fingerprint}): each candidate must differ")
        else:
            seen[fingerprint] = i
    return errors


def sweep_schema(field_schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """JSON schema of the ``sweep`` form field, so that Airflow refuses a bad sweep when the run is created.

    :param field_schemas: the JSON schema of each key of :data:`SWEEP_KEYS` (the form field's ``type`` and bounds).
    :return: null, or a list of at most :data:`MAX_CANDIDATES` override objects with only those keys, or a grid
        object of those keys to non-empty lists of values; each value against its field's schema. Duplicates
        and the grid's size are checked by :func:`sweep_errors` (JSON schema cannot compare combinations).
    """
    values = {k: {key: v for key, v in field_schemas[k].items() if key in ("type", "allOf", "enum")}
              for k in SWEEP_KEYS}
    override = {"type": "object", "additionalProperties": False, "properties": values}
    grid = {"type": "object", "additionalProperties": False,
            "properties": {k: {"type": "array", "minItems": 1, "maxItems": MAX_CANDIDATES, "items": v}
                           for k, v in values.items()}}
    return {"oneOf": [{"type": "null"}, {"type": "array", "maxItems": MAX_CANDIDATES, "items": override}, grid]}


def candidate_params(params: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The params candidate ``override`` trains with: the run's params with the override applied."""
    return {**params, **override}


def best_candidate(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The candidate that goes on to the gate.

    :param results: one entry per candidate with ``index`` (its position in the sweep) and ``report`` (its
        evaluation report: ``ci95`` [lower, upper], ``success_rate``).
    :return: the winning entry. Rule: the highest Wilson 95% lower bound (``ci95[0]``); a tie goes to the higher
        ``success_rate``, then to the lower ``index``.
    :raises ValueError: no results.
    """
    if not results:
        raise ValueError("no candidate was evaluated: nothing to pick from")
    return dict(min(results, key=lambda r: (-float(r["report"]["ci95"][0]), -float(r["report"]["success_rate"]),
                                            int(r["index"]))))


#: How :func:`best_candidate` decides, in words (the lineage's ``sweep.rule``).
PICK_RULE = ("highest Wilson 95% lower bound of the closed-loop success rate; ties: higher success rate, "
             "then lower candidate index")


#: The mapped tasks of one candidate, in run order (a candidate's first failed one is its cause).
CANDIDATE_TASKS = (ids.SWEEP_WAIT_FOR_SLOT, ids.SWEEP_SUBMIT_TRAINING, ids.SWEEP_TRAIN_POLICY,
                   ids.SWEEP_TRAIN_ON_SLURM, ids.SWEEP_TRAIN_ON_EKS, ids.SWEEP_WAIT_FOR_CHECKPOINT, ids.SWEEP_EVAL_COMMAND,
                   ids.SWEEP_RUN_EVALUATION, ids.SWEEP_READ_EVAL_REPORT)


def failed_candidate(states: dict[str, str], job: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One candidate's failure from its mapped tasks' states, or ``None`` when none of them failed.

    :param states: task id (:data:`CANDIDATE_TASKS`) → that candidate's task instance state.
    :param job: its Batch job's ``DescribeJobs`` entry, when it was submitted (``jobId``, ``status``,
        ``statusReason``).
    :return: ``{"state", "reason", "batch_job_id", "tasks"}``: ``state`` of its first failed task (``failed``, or
        ``upstream_failed`` when only followers of a failure are listed), ``reason`` naming that task and the job's
        status and reason, ``tasks`` every failed one.
    """
    bad = {t: states[t] for t in CANDIDATE_TASKS if states.get(t) in FAILED_STATES}
    if not bad:
        return None
    first = next((t for t, s in bad.items() if s == "failed"), next(iter(bad)))
    reason = f"{first} is {bad[first]}"
    if job:
        reason += f"; Batch job {job.get('jobId')} {job.get('status')}"
        if job.get("statusReason"):
            reason += f" ({job['statusReason']})"
    return {"state": bad[first], "reason": reason, "batch_job_id": (job or {}).get("jobId"), "tasks": bad}


def training_task_id(plan: dict) -> str:
    """The mapped task whose results are the candidates' trainings: ``sweep.train_policy`` (Batch) or
    ``sweep.train_on_slurm`` (HyperPod) or ``sweep.train_on_eks`` (HyperPod EKS)."""
    return ids.SWEEP_TRAINING_BY_BACKEND.get(plan.get("backend", "batch"), ids.SWEEP_TRAIN_POLICY)
