"""The ``sim_to_real`` trigger form: typed params in sections, and the cross-field rules.

Single-field limits (types, ranges, enums, patterns) are JSON schema on each ``Param`` and are
refused by Airflow before a run is created (trigger form, REST API, ``airflow dags trigger`` and
``dag.test(run_conf=...)`` alike, ``ParamValidationError`` / HTTP 400); ranges sit inside ``allOf``
so that the form refuses an out-of-range number instead of clamping it (:func:`_range`). Airflow
accepts conf keys that are no param; ``check_conf_keys`` refuses them (with a "did you mean" list)
in the first task of the run, as ``apply_run_defaults`` does for the scheduled runs' ``run_defaults``.
Rules that involve several fields cannot be expressed per param; ``check_params`` applies them in
the first task of the run, before any AWS call that costs money, and raises ``ParamRuleError``
listing every broken rule.

Defaults are chosen so that a run with no overrides works in the local sandbox (a ~1 minute
toy training on a MuJoCo task); production runs override the training section.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Tasks the training image can run (:mod:`sim2real.contract.tasks`). MuJoCo tasks run on CPU nodes and in
#: the sandbox; Isaac Lab tasks need the Isaac Lab GPU image (containers/isaaclab/).
from sim2real.contract.tasks import ISAACLAB_TASKS, MUJOCO_TASKS, TASKS  # noqa: F401 (re-exported)


SECTION_TRAINING = "Training (RL)"
SECTION_EVAL = "Closed-loop evaluation"
SECTION_VLA = "VLA fine-tune (GR00T)"
SECTION_DEPLOY = "Edge deployment"
SECTION_BUDGET = "Budget and timeouts"
#: The trigger form's sections, in display order.
FORM_SECTIONS = (SECTION_TRAINING, SECTION_EVAL, SECTION_VLA, SECTION_DEPLOY, SECTION_BUDGET)

#: SageMaker training instance types offered for the GR00T fine-tune (GPU count per instance,
#: from the SageMaker instance type pages).
VLA_INSTANCE_GPUS = {
    "ml.g5.12xlarge": 4,
    "ml.g6e.12xlarge": 4,
    "ml.p4d.24xlarge": 8,
    "ml.p5.48xlarge": 8,
}


#: The JSON Schema dialect every form field's schema declares (its ``$schema``). Airflow validates a ``Param`` with
#: ``jsonschema.validate``, which first checks the schema itself against its dialect's metaschema, on every call; and
#: it dumps (validates) every task's copy of the DAG's params twice whenever it serializes the DAG (the DAG
#: processor at each parse, ``dag.test()``): 88 dumps of 33 fields for ``sim_to_real``. Without ``$schema``
#: jsonschema takes its newest dialect, 2020-12, whose metaschema's dynamic references make that check about 10
#: times slower than draft-07's: serializing ``sim_to_real`` took 12 s instead of about 1 (``make bench``, row
#: "DAG serialization"). The fields use draft-07 keywords only (checked in tests); the trigger form reads neither.
PARAM_SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"


def declare_dialect(params: dict[str, Any]) -> dict[str, Any]:
    """Give every ``Param`` of ``params`` the schema dialect :data:`PARAM_SCHEMA_DIALECT` (kept when one is set);
    returns ``params``."""
    for spec in params.values():
        spec.schema.setdefault("$schema", PARAM_SCHEMA_DIALECT)
    return params


def build_params() -> dict[str, Any]:
    """Return the DAG's ``params`` mapping (``airflow.sdk.Param`` objects): every stage's fields
    (:func:`sim2real.orchestration.stages.form_params`, each stage module's ``params()``), in form-section order.

    Imported by the DAG file at parse time: it builds objects only, no I/O.
    """
    from sim2real.orchestration.stages import form_params

    params = form_params()
    for spec in params.values():  # the form shows no bounds (see _range): the description states them
        allowed = range_text(spec.schema)
        if allowed:
            spec.description = f"{spec.description} {allowed}" if spec.description else allowed
    return declare_dialect(params)


def _range(**bounds: float) -> dict[str, Any]:
    """A number field's bounds as JSON schema that Airflow enforces but the trigger form does not clamp to.

    The Airflow 3 trigger form's number widget (``FieldNumber``) hands the schema's top-level ``minimum`` /
    ``maximum`` to its number input, which clamps a typed value to them on blur: -5 episodes silently became
    1 and the run was created with it. Inside ``allOf`` the bounds are not read by the form but are still
    checked by Airflow's param validation when the run is created (trigger form, REST API ``POST
    /api/v2/dags/{dag_id}/dagRuns``, ``airflow dags trigger``, ``dag.test(run_conf=...)``), which refuses
    the run with the reason (``-5 is less than the minimum of 1``).

    :param bounds: JSON schema keywords ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``.
    :return: ``{"allOf": [bounds]}`` to merge into a ``Param``'s schema.
    """
    unknown = set(bounds) - set(_BOUND_WORDS)
    if unknown:
        raise ValueError(f"not a bound keyword: {sorted(unknown)}")
    return {"allOf": [dict(bounds)]}


_BOUND_WORDS = {"minimum": ">= {}", "exclusiveMinimum": "> {}", "maximum": "<= {}", "exclusiveMaximum": "< {}"}


def param_bounds(schema: Mapping[str, Any]) -> dict[str, float]:
    """The bound keywords of a param's schema (top level or inside ``allOf``), e.g. ``{"minimum": 1}``."""
    found = {k: schema[k] for k in _BOUND_WORDS if k in schema}
    for part in schema.get("allOf") or []:
        found.update({k: part[k] for k in _BOUND_WORDS if k in part})
    return found


def range_text(schema: Mapping[str, Any]) -> str:
    """``"Allowed: >= 1, <= 16."`` for a bounded field, ``""`` otherwise."""
    bounds = param_bounds(schema)
    if not bounds:
        return ""
    return "Allowed: " + ", ".join(_BOUND_WORDS[k].format(f"{v:,}" if isinstance(v, int) else v)
                                   for k, v in bounds.items()) + "."


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
               "object": "an object", "array": "a list", "null": "empty"}


def _problem_text(err: Any) -> str:
    """One clause for a jsonschema ``ValidationError``: what the value must be (from its keyword)."""
    kw, bound = err.validator, err.validator_value
    if kw == "minimum":
        return f"it must be at least {bound}"
    if kw == "maximum":
        return f"it must be at most {bound}"
    if kw == "exclusiveMinimum":
        return f"it must be above {bound}"
    if kw == "exclusiveMaximum":
        return f"it must be below {bound}"
    if kw == "type":
        types = [bound] if isinstance(bound, str) else list(bound)
        return "it must be " + " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    if kw == "enum":
        return "it must be one of " + ", ".join(repr(v) for v in bound)
    if kw == "pattern":
        return f"it must match the pattern {bound}"
    if kw in ("minLength", "maxLength"):
        return f"it must have {'at least' if kw == 'minLength' else 'at most'} {bound} characters"
    if kw in ("minItems", "maxItems"):
        return f"it must have {'at least' if kw == 'minItems' else 'at most'} {bound} items"
    return err.message  # any other keyword: jsonschema's own one-line message


def param_problem(name: str, value: Any, spec: Any) -> str | None:
    """Why a form field refuses ``value``, as one sentence naming the field, e.g. ``eval_episodes = -5 is refused:
    it must be at least 1`` (``None`` when the value is valid). Checks the ``Param``'s JSON schema as Airflow does
    (``jsonschema`` with a format checker); the first problem of the deepest schema part is named (jsonschema's
    ``best_match``), instead of the validator's multi-line dump (schema excerpt, instance).
    """
    from jsonschema import FormatChecker, validators
    from jsonschema.exceptions import best_match

    validator = validators.validator_for(spec.schema)(spec.schema, format_checker=FormatChecker())
    err = best_match(validator.iter_errors(value))
    if err is None:
        return None
    return f"{name} = {value!r} is refused: {_problem_text(err)}"


def unknown_key_errors(keys: Iterable[str], known: Iterable[str], *, where: str) -> list[str]:
    """One message per key of ``keys`` that is not in ``known``, each with a "did you mean" list.

    :param keys: the keys given (a run's conf, the environment config's ``run_defaults``).
    :param known: the trigger form's field names.
    :param where: how the message names the source, e.g. ``"run conf"``.
    :return: e.g. ``["run conf key 'eval_epsiodes' is not a field of the trigger form (did you mean
        'eval_episodes'?)"]``; the closest names by ``difflib.get_close_matches`` (cutoff 0.6), else the
        list of every field.
    """
    import difflib

    known = sorted(known)
    errors = []
    for key in keys:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=3, cutoff=0.6)
        hint = ("did you mean " + " or ".join(repr(c) for c in close) + "?") if close else \
            "the fields are: " + ", ".join(known)
        errors.append(f"{where} key {key!r} is not a field of the trigger form ({hint})")
    return errors


def check_conf_keys(conf: Mapping[str, Any] | None, known: Iterable[str]) -> None:
    """Refuse a run conf with a key that is not one of the DAG's params.

    Airflow validates each param's value against its schema when the run is created, but accepts and ignores
    keys that are no param (Airflow 3.3.1 ``SerializedParamsDict.deep_merge`` adds them as schema-less
    params), so a typo like ``eval_epsiodes`` would silently run with the default. The DAG's first task calls
    this before anything else.

    :param conf: ``dag_run.conf`` (None or empty: nothing to check).
    :param known: the DAG's param names; the keys a run of the DAG sets on the next one and that are no field of
        the form (:data:`sim2real.orchestration.stages.rounds.CONF_ONLY_KEYS`) are accepted too.
    :raises ParamRuleError: listing every unknown key with its closest field names.
    """
    from sim2real.orchestration.stages.rounds import CONF_ONLY_KEYS

    errors = unknown_key_errors(conf or {}, [*known, *CONF_ONLY_KEYS], where="run conf")
    if errors:
        raise ParamRuleError(errors, headline="the run conf has keys the DAG does not know (nothing was started)")


class ParamRuleError(ValueError):
    """One or more cross-field rules are broken; ``errors`` lists each reason."""

    def __init__(self, errors: list[str], headline: str = "invalid parameter combination"):
        self.errors = errors
        super().__init__(f"{headline}:\n- " + "\n- ".join(errors))


def check_params(params: Mapping[str, Any], env: Mapping[str, Any] | None = None) -> None:
    """Apply the cross-field rules to a run's params.

    :param params: the run's params (after Airflow's per-field validation).
    :param env: the environment config (``sim2real.orchestration.config``), for rules that depend on it.
    :raises ParamRuleError: listing every broken rule, each with the reason and the fix.
    """
    env = env or {}
    errors: list[str] = []
    backend = params.get("training_backend", "batch")
    task = params.get("task", "")
    hyperpod_cfg = env.get("hyperpod") or {}
    if backend == "hyperpod":
        if not (params.get("hyperpod_cluster_name") or hyperpod_cfg.get("cluster_name")):
            errors.append("training_backend 'hyperpod' needs a cluster: set hyperpod_cluster_name in the form "
                          "or hyperpod.cluster_name in the environment config")
        if not (hyperpod_cfg.get("submit_host_tag_key") and hyperpod_cfg.get("submit_host_tag_value")):
            errors.append("training_backend 'hyperpod' needs the head/login node that submits the Slurm job: set "
                          "hyperpod.submit_host_tag_key and hyperpod.submit_host_tag_value (its EC2 tag; the "
                          "instance runs the SSM agent and the Slurm client) in the environment config")
    if task in ISAACLAB_TASKS and env.get("sandbox"):
        errors.append(f"task {task!r} needs the Isaac Lab GPU image; the local sandbox runs only "
                      f"MuJoCo tasks {list(MUJOCO_TASKS)}")
    if params.get("num_nodes", 1) > 1 and task in MUJOCO_TASKS:
        errors.append(f"num_nodes > 1 is a GPU (NCCL) path; MuJoCo task {task!r} trains on one CPU node "
                      "with vectorised environments: set num_nodes to 1 or pick an Isaac Lab task")
    if params.get("deploy_to_edge") and not params.get("run_vla_finetune"):
        errors.append("deploy_to_edge needs run_vla_finetune (the deployed model is the approved fine-tuned "
                      "model package)")
    errors.extend(gate_reach_errors(params))
    errors.extend(_sweep_rule_errors(params, backend))
    budget = params.get("train_time_budget_seconds", 0)
    timeout_s = float(params.get("training_timeout_hours", 0)) * 3600
    if budget and budget >= timeout_s:
        errors.append(f"train_time_budget_seconds ({budget}) must be below training_timeout_hours "
                      f"({timeout_s:.0f} s) so the trainer can write its final checkpoint before the stage "
                      "times out")
    from sim2real.orchestration.stages.rounds import rule_errors as round_rule_errors

    errors.extend(round_rule_errors(params))
    if errors:
        raise ParamRuleError(errors)


def min_episodes_for_lower_bound(threshold: float) -> int | None:
    """The fewest evaluation episodes whose best outcome (every episode a success) has a 95% Wilson lower bound
    of at least ``threshold``; ``None`` when none has (``threshold`` >= 1: the bound of n/n is n / (n + z²) < 1).

    From the Wilson interval at p = 1: the lower bound is n / (n + z²), so n >= threshold·z² / (1 - threshold).
    """
    import math

    from sim2real.contract.stats import Z95, wilson_interval

    if threshold >= 1:
        return None
    if threshold <= 0:
        return 1
    n = max(1, math.ceil(threshold * Z95 * Z95 / (1 - threshold)))
    while wilson_interval(n, n)[0] < threshold:  # float rounding at the boundary
        n += 1
    while n > 1 and wilson_interval(n - 1, n - 1)[0] >= threshold:
        n -= 1
    return n


def gate_reach_errors(params: Mapping[str, Any]) -> list[str]:
    """A quality gate no evaluation can pass: on the 95% Wilson lower bound (``gate_on_lower_bound``) the best
    outcome of ``eval_episodes`` episodes (all successes) has a lower bound below 1 (0.963 for 100 episodes), so
    a ``min_success_rate`` above it fails every run and every retraining round, whatever the policy.

    :return: one sentence naming the fields, the reachable bar and the episodes it would take (empty when the
        gate can pass, or gates on the point estimate, whose best value is 1).
    """
    from sim2real.contract.stats import wilson_interval

    if not params.get("gate_on_lower_bound") or params.get("min_success_rate") is None:
        return []
    threshold, episodes = float(params["min_success_rate"]), int(params.get("eval_episodes") or 0)
    if episodes <= 0:
        return []  # eval_episodes' own schema refuses it
    best = wilson_interval(episodes, episodes)[0]
    if threshold <= best:
        return []
    needed = min_episodes_for_lower_bound(threshold)
    more = (f"raise eval_episodes to at least {needed} episodes" if needed is not None
            else "no number of episodes reaches 1.0 on the lower bound")
    return [f"min_success_rate {params['min_success_rate']} cannot be reached on the 95% Wilson lower bound with "
            f"eval_episodes {episodes}: even {episodes}/{episodes} successes give {best:.3f}, so every run would "
            f"fail the gate; lower min_success_rate to at most {int(best * 1000) / 1000:.3f}, {more}, or turn off "
            f"gate_on_lower_bound to gate on the success rate itself"]


def _sweep_rule_errors(params: Mapping[str, Any], backend: str) -> list[str]:
    """The ``sweep`` field's rules (:func:`sim2real.orchestration.candidates.sweep_errors`: allowed keys, each value
    against its field's schema, the candidate limit, no duplicates). Each candidate's own time budget must also
    stay below ``training_timeout_hours``. Both backends run sweeps (AWS Batch: a job per candidate; HyperPod: a
    Slurm job array); on HyperPod the candidates share one array's ``#SBATCH --time``
    (``training_timeout_hours``), which is why that bound holds for every candidate alike."""
    from sim2real.orchestration.candidates import candidate_params, expand_sweep, sweep_errors

    sweep = params.get("sweep")
    if sweep in (None, [], {}):
        return []
    errors = sweep_errors(sweep, params, build_params())
    if errors:
        return errors
    count = len(expand_sweep(sweep))
    minimum = int(params.get("sweep_min_candidates") or 1)
    if minimum > count:
        errors.append(f"sweep_min_candidates {minimum} is above the sweep's {count} candidates: at most {count} "
                      "can succeed (set it to the number of candidates for every one to be needed)")
    timeout_s = float(params.get("training_timeout_hours", 0)) * 3600
    for i, override in enumerate(expand_sweep(sweep)):
        budget = candidate_params(params, override).get("train_time_budget_seconds", 0)
        if budget and budget >= timeout_s and "train_time_budget_seconds" in override:
            errors.append(f"sweep candidate {i}: train_time_budget_seconds ({budget}) must be below "
                          f"training_timeout_hours ({timeout_s:.0f} s)")
    return errors


def apply_run_defaults(params: Mapping[str, Any], env: Mapping[str, Any], *, run_type: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The params a run uses: for a **scheduled** run, the environment config's ``run_defaults`` over the form's.

    The form's defaults are sandbox-sized (a one-minute toy training); a nightly run on a real account
    needs production values (task, ``num_nodes``, ``max_iterations``, ``train_time_budget_seconds: 0``, …).
    Those come from the optional ``run_defaults`` object of the environment config and apply to
    scheduled runs only (``dag_run.run_type == "scheduled"``); a manual run keeps the form's values.
    Each value is checked against its field's JSON schema, as the trigger form would.

    :param params: the run's params (Airflow-validated).
    :param env: the environment config.
    :param run_type: ``dag_run.run_type`` (a ``DagRunType`` or its string value).
    :return: ``(params to use, the run_defaults that were applied)``.
    :raises ParamRuleError: ``run_defaults`` is not an object, names an unknown field, or has a value its
        field refuses (every problem listed).
    """
    kind = str(getattr(run_type, "value", run_type) or "")
    if kind != "scheduled":
        return dict(params), {}
    defaults = env.get("run_defaults") or {}
    if not isinstance(defaults, Mapping):
        raise ParamRuleError([f"environment config run_defaults must be an object, got {type(defaults).__name__}"])
    specs = build_params()
    applied: dict[str, Any] = {}
    errors: list[str] = unknown_key_errors(defaults, specs, where="environment config run_defaults")
    for key, value in defaults.items():
        if key not in specs:
            continue
        problem = param_problem(f"environment config run_defaults.{key}", value, specs[key])
        if problem:
            errors.append(problem)
            continue
        applied[key] = specs[key].resolve(value)
    if errors:
        raise ParamRuleError(errors)
    return {**params, **applied}, applied
