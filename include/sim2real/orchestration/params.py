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

#: Tasks the training image can run. MuJoCo tasks run on CPU nodes and in the sandbox;
#: Isaac Lab tasks need the Isaac Lab GPU image (containers/isaaclab/).
MUJOCO_TASKS = ("Reacher-v5", "InvertedPendulum-v5", "Pusher-v5")
ISAACLAB_TASKS = ("Isaac-Velocity-Rough-H1-v0", "Isaac-Reach-SO101-v0", "Isaac-Lift-SO101-v0")
TASKS = MUJOCO_TASKS + ISAACLAB_TASKS

SECTION_TRAINING = "Training (RL)"
SECTION_EVAL = "Closed-loop evaluation"
SECTION_VLA = "VLA fine-tune (GR00T)"
SECTION_DEPLOY = "Edge deployment"
SECTION_BUDGET = "Budget and timeouts"

#: SageMaker training instance types offered for the GR00T fine-tune (GPU count per instance,
#: from the SageMaker instance type pages).
VLA_INSTANCE_GPUS = {
    "ml.g5.12xlarge": 4,
    "ml.g6e.12xlarge": 4,
    "ml.p4d.24xlarge": 8,
    "ml.p5.48xlarge": 8,
}


def build_params() -> dict[str, Any]:
    """Return the DAG's ``params`` mapping (``airflow.sdk.Param`` objects).

    Imported by the DAG file at parse time: it builds objects only, no I/O.
    """
    from airflow.sdk import Param

    params = {
        # ---------------- training
        "training_backend": Param(
            "batch", type="string", enum=["batch", "hyperpod"], title="Training backend",
            description="batch: an AWS Batch multi-node job. hyperpod: a Slurm job (sbatch through SSM on "
            "the head node) on a SageMaker HyperPod cluster whose GPU instance group is scaled up for the "
            "run and back to its minimum afterwards.",
            section=SECTION_TRAINING,
        ),
        "task": Param(
            "Reacher-v5", type="string", enum=list(TASKS), title="Task",
            description="Gymnasium/MuJoCo task id (CPU) or Isaac Lab task id (GPU image).",
            section=SECTION_TRAINING,
        ),
        "num_nodes": Param(
            1, type="integer", title="Nodes",
            description="Nodes of the multi-node job (each node: all GPUs of one instance).",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=16)),
        "max_iterations": Param(
            1000, type="integer", title="Max iterations",
            description="PPO iterations (one rollout per environment + one update each).",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=100_000)),
        "num_envs": Param(
            32, type="integer", title="Vectorised environments per process",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=65_536)),
        "seed": Param(0, type="integer", title="Training seed",
                      section=SECTION_TRAINING, **_range(minimum=0, maximum=2**31 - 1)),
        "train_time_budget_seconds": Param(
            60, type="integer", title="Training time budget (s)",
            description="The trainer stops after this many seconds and still writes its final checkpoint "
            "and manifest. 0 = no budget (runs max_iterations).",
            section=SECTION_TRAINING, **_range(minimum=0, maximum=7 * 24 * 3600)),
        # Optional text fields are nullable: the trigger form sends an empty field as null, and a field
        # whose type does not allow null is required there (its Trigger button stays disabled).
        "image_source_version": Param(
            None, type=["null", "string"], maxLength=128, pattern=r"^[A-Za-z0-9._/-]*$",
            title="Training image source version",
            description="Git ref / commit CodeBuild builds. Empty: the environment config's source_version.",
            section=SECTION_TRAINING,
        ),
        "hyperpod_cluster_name": Param(
            None, type=["null", "string"], maxLength=63, pattern=r"^([a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})?$",
            title="HyperPod cluster", description="Needed when the backend is hyperpod "
            "(empty: the environment config's cluster).", section=SECTION_TRAINING,
        ),
        # ---------------- evaluation
        "eval_episodes": Param(100, type="integer", title="Episodes",
                               section=SECTION_EVAL, **_range(minimum=1, maximum=10_000)),
        "eval_seed": Param(1000, type="integer", title="First episode seed",
                           description="Episode i uses seed eval_seed + i.", section=SECTION_EVAL,
                           **_range(minimum=0, maximum=2**31 - 1)),
        "min_success_rate": Param(
            0.8, type="number", title="Quality gate: minimum success rate",
            description="The release stops unless the evaluated success rate (by default its 95% interval's "
            "lower bound) reaches this value. Reference for the default task (Reacher-v5, success = fingertip "
            "within 0.05 m of the target at the last step): a uniform random policy scores about 0.05-0.10; 60 s "
            "of training with 32 environments on 2 cores 0.98-1.00 (lower bound 0.93-0.96 over 100 episodes). "
            "Set it per task: Pusher-v5 reaches about 0.2 in 300 s.",
            section=SECTION_EVAL, **_range(minimum=0, maximum=1)),
        "gate_on_lower_bound": Param(
            True, type="boolean", title="Gate on the 95% interval's lower bound",
            description="Stricter: compare the Wilson lower bound instead of the point estimate.",
            section=SECTION_EVAL,
        ),
        # ---------------- VLA fine-tune
        "run_vla_finetune": Param(True, type="boolean", title="Fine-tune GR00T and release",
                                  description="Off: stop after the quality gate (RL only).", section=SECTION_VLA),
        "embodiment_tag": Param("new_embodiment", type="string", pattern=r"^[a-z0-9_]+$",
                                title="Embodiment tag", section=SECTION_VLA),
        "vla_instance_type": Param("ml.p4d.24xlarge", type="string", enum=list(VLA_INSTANCE_GPUS),
                                   title="Fine-tune instance type", section=SECTION_VLA),
        "vla_max_steps": Param(10_000, type="integer", title="Max steps",
                               section=SECTION_VLA, **_range(minimum=1, maximum=1_000_000)),
        "vla_global_batch_size": Param(32, type="integer", title="Global batch size", section=SECTION_VLA,
                                       **_range(minimum=1, maximum=4096)),
        "dataset_s3_uri": Param(None, type=["null", "string"], pattern=r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?)?$",
                                title="Dataset S3 URI", description="LeRobot dataset. Empty: the bucket's "
                                "datasets/default/.", section=SECTION_VLA),
        "deploy_to_edge": Param(True, type="boolean", title="Deploy to robots", section=SECTION_DEPLOY),
        "thing_group_name": Param(None, type=["null", "string"], maxLength=128, pattern=r"^[a-zA-Z0-9:_-]*$",
                                  title="Thing group", description="Empty: the environment config's group.",
                                  section=SECTION_DEPLOY),
        "rollout_max_per_minute": Param(10, type="integer", title="Rollout: devices per minute",
                                        section=SECTION_DEPLOY, **_range(minimum=1, maximum=1000)),
        "abort_failure_threshold_percent": Param(10.0, type="number",
                                                 title="Abort when this % of devices fail",
                                                 section=SECTION_DEPLOY, **_range(minimum=0, maximum=100)),
        "deployment_timeout_minutes": Param(
            60, type="integer", title="Deployment timeout (min)",
            description="Cancel the Greengrass deployment and fail (no retry), naming each robot that has not "
            "finished, when the robots have not all finished after this long (below the stage's 2 h limit).",
            section=SECTION_DEPLOY, **_range(minimum=1, maximum=110)),
        "runnable_timeout_minutes": Param(
            30, type="integer", title="Max minutes in RUNNABLE",
            description="Fail (and terminate the job) when the training job waits for capacity longer.",
            section=SECTION_BUDGET, **_range(minimum=1, maximum=24 * 60)),
        "training_timeout_hours": Param(12.0, type="number",
                                        title="Training duration bound (h)",
                                        description="Costs the run when no time budget is set, and must exceed "
                                        "the time budget. The training task itself gives up after 12 h.",
                                        section=SECTION_BUDGET, **_range(exclusiveMinimum=0, maximum=12)),
        "eval_timeout_minutes": Param(30, type="integer",
                                      title="Evaluation command timeout (min)",
                                      description="SSM executionTimeout (the SSM default would be 1 h).",
                                      section=SECTION_BUDGET, **_range(minimum=1, maximum=110)),
        "max_budget_usd": Param(500.0, type="number", title="Max budget (USD)",
                                section=SECTION_BUDGET, **_range(minimum=0)),
    }
    for spec in params.values():  # the form shows no bounds (see _range): the description states them
        allowed = range_text(spec.schema)
        if allowed:
            spec.description = f"{spec.description} {allowed}" if spec.description else allowed
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
    :param known: the DAG's param names.
    :raises ParamRuleError: listing every unknown key with its closest field names.
    """
    errors = unknown_key_errors(conf or {}, known, where="run conf")
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
    budget = params.get("train_time_budget_seconds", 0)
    timeout_s = float(params.get("training_timeout_hours", 0)) * 3600
    if budget and budget >= timeout_s:
        errors.append(f"train_time_budget_seconds ({budget}) must be below training_timeout_hours "
                      f"({timeout_s:.0f} s) so the trainer can write its final checkpoint before the stage "
                      "times out")
    if errors:
        raise ParamRuleError(errors)


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
        try:
            applied[key] = specs[key].resolve(value)
        except Exception as err:  # noqa: BLE001 - ParamValidationError (jsonschema message)
            errors.append(f"environment config run_defaults.{key} = {value!r} is refused: {err}")
    if errors:
        raise ParamRuleError(errors)
    return {**params, **applied}, applied
