"""The ``sim_to_real`` trigger form: typed params in sections, and the cross-field rules.

Single-field limits (types, ranges, enums, patterns) are JSON schema on each ``Param`` and are
refused by Airflow before a run is created (trigger form, REST API, ``airflow dags trigger`` and
``dag.test(run_conf=...)`` alike, ``ParamValidationError`` / HTTP 400); ranges sit inside ``allOf``
so that the form refuses an out-of-range number instead of clamping it (:func:`_range`). Airflow
accepts conf keys that are no param; ``check_conf_keys`` refuses them (with a "did you mean" list)
in the first task of the run, as ``apply_run_defaults`` does for the scheduled runs' ``run_defaults``.
Rules that involve several fields cannot be expressed per param; ``check_params`` applies them in
the first task of the run, before any AWS call that costs money, and raises ``ParamRuleError``
listing every broken rule. The form is composed from the stages' fields, so ``build_params``,
``check_params`` and ``apply_run_defaults`` live in :mod:`sim2real.orchestration.stages.run`; this module holds
what every stage's fields share (sections, bounds, field checks, the conf keys that are no field).

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


#: The form field through which a round's run hands the next round its link (set by ``plan_next_round``,
#: :mod:`sim2real.orchestration.stages.rounds`).
RETRAIN_FIELD = "retrain_round"

#: Run conf keys that are no field of the trigger form (nothing a person fills in), with what sets them:
#: :data:`RETRAIN_FIELD`, the link the run of a round that failed the gate gives the next round's run (the round
#: number, the run it continues, the checkpoint to resume from, the earlier rounds' results). Airflow's form can
#: hide a field only when it has a ``const`` value, which a link that differs per round cannot have; the key is
#: therefore accepted in the run conf (:func:`check_conf_keys`) and checked by
#: :func:`sim2real.orchestration.stages.rounds.rule_errors`.
CONF_ONLY_KEYS = {RETRAIN_FIELD: "set by the previous retraining round's run"}


#: The JSON Schema dialect every form field's schema declares (its ``$schema``). Airflow validates a ``Param`` with
#: ``jsonschema.validate``, which first checks the schema itself against its dialect's metaschema, on every call; and
#: it dumps (validates) every task's copy of the DAG's params twice whenever it serializes the DAG (the DAG
#: processor at each parse, ``dag.test()``; the sandbox's and the tests' processes check each schema once:
#: ``sim2real.dev.schema_checks``). Without ``$schema``
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
        the form (:data:`CONF_ONLY_KEYS`) are accepted too.
    :raises ParamRuleError: listing every unknown key with its closest field names.
    """
    errors = unknown_key_errors(conf or {}, [*known, *CONF_ONLY_KEYS], where="run conf")
    if errors:
        raise ParamRuleError(errors, headline="the run conf has keys the DAG does not know (nothing was started)")


class ParamRuleError(ValueError):
    """One or more cross-field rules are broken; ``errors`` lists each reason."""

    def __init__(self, errors: list[str], headline: str = "invalid parameter combination"):
        self.errors = errors
        super().__init__(f"{headline}:\n- " + "\n- ".join(errors))


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


#: Below this many evaluation episodes the run note warns that the Wilson 95% interval is too wide to gate on.
MIN_GATE_EPISODES = 20


def gate_warnings(params: Mapping[str, Any]) -> list[str]:
    """Why this run's quality gate says little, one sentence each (empty when it is sound).

    Flags a threshold of 0 (``min_success_rate``: every policy passes) and fewer than
    :data:`MIN_GATE_EPISODES` evaluation episodes (``eval_episodes``: the interval's half-width at a 0.5
    success rate is then above 0.2). The values are reported as given, never changed.
    """
    from sim2real.contract.stats import wilson_interval

    out = []
    threshold = params.get("min_success_rate")
    if threshold is not None and float(threshold) <= 0:
        out.append("Quality gate at 0 (`min_success_rate`): every evaluated policy passes, the gate checks nothing.")
    episodes = params.get("eval_episodes")
    if episodes is not None and int(episodes) < MIN_GATE_EPISODES:
        n = int(episodes)
        lo, hi = wilson_interval(n // 2, n)
        out.append(f"Only {n} evaluation episodes (`eval_episodes` < {MIN_GATE_EPISODES}): the 95% Wilson interval "
                   f"of a 0.5 success rate is [{lo:.2f}, {hi:.2f}], too wide to gate on.")
    return out
