"""The stage modules: plan sections as dataclasses that survive XCom (JSON), every stage of the DAG owning
its form fields, docs and task ids, and the contracts the Airflow side shares with the containers."""

import dataclasses
import json
import re

import pytest

from sim2real.contract import env_vars, progress, task_ids
from sim2real.contract import tasks as contract_tasks
from sim2real.orchestration import stages
from sim2real.orchestration.stages import STAGES
from sim2real.orchestration.stages.run import PLANNED, plan_run
from sim2real.orchestration.stages._base import PlanSection, flat_xcoms, refs

from tests.orchestration.test_config import GOOD
from .test_stages import PARAMS


def _plan(**overrides):
    return plan_run(dag_id="sim_to_real", run_id="manual__2026-11-29T00:00:00+00:00",
                    params={**PARAMS, **overrides}, env=GOOD)


def _section_classes():
    return [obj for stage in STAGES for obj in vars(stage).values()
            if isinstance(obj, type) and issubclass(obj, PlanSection) and obj is not PlanSection
            and obj.__module__ == stage.__name__]


@pytest.mark.parametrize("backend", ["batch", "hyperpod"])
def test_every_plan_section_round_trips_through_json(backend):
    from .test_stages import HYPERPOD_ENV

    plan = plan_run(dag_id="sim_to_real", run_id="manual__2026-11-29T00:00:00+00:00",
                    params={**PARAMS, "training_backend": backend}, env=GOOD if backend == "batch" else HYPERPOD_ENV)
    back = json.loads(json.dumps(plan))  # what an XCom pull hands a task
    assert back == plan
    classes = _section_classes()
    for cls in classes:
        section = cls.from_plan(back)
        assert dataclasses.is_dataclass(section)
        assert section.to_json() == ({k: plan[k] for k in cls.field_names()} if not cls.SECTION
                                     else plan[cls.SECTION])
    # every top-level key is a run-wide field or a stage's section: nothing is planned outside them
    sections = {c.SECTION for c in classes if c.SECTION}
    assert set(plan) == sections | set(stages.run.RunPlan.field_names())
    # one section per planned stage, and the run's tracking section (planned off, started by prepare_run)
    assert len(sections) == len(PLANNED) + 1 and stages.run.TrackingPlan.SECTION in sections


def test_the_plan_keeps_its_sections_and_their_order():
    plan = _plan()
    assert list(plan)[-10:] == ["quality_gate", "image", "batch", "hyperpod", "hyperpod_eks", "checkpoint", "evaluation", "vla",
                               "deploy", "rounds"]


def test_section_refs_are_checked_against_the_dataclass():
    class FakeXCom(dict):
        def __missing__(self, key):
            return f"<xcom {key}>"

    xcom = FakeXCom()
    assert refs(xcom, stages.evaluate.EvaluationPlan).report_uri == "<xcom evaluation.report_uri>"
    with pytest.raises(AttributeError, match="'evaluation'.*no field 'report_url'"):
        _ = refs(xcom, stages.evaluate.EvaluationPlan).report_url


def test_flat_xcoms_has_one_key_per_section_field_and_the_plan():
    plan = _plan()
    flat = flat_xcoms(plan)
    assert flat["plan"] == plan and flat["run_key"] == plan["run_key"]
    for cls in _section_classes():
        for name in cls.field_names():
            if cls.SECTION:
                assert flat[f"{cls.SECTION}.{name}"] == plan[cls.SECTION][name]


def test_training_environment_uses_the_contract_names():
    plan = _plan()
    assert set(plan["batch"]["environment"]) == set(env_vars.TRAINING) | {env_vars.TIME_BUDGET_SECONDS}
    assert plan["hyperpod"]["environment"] == plan["batch"]["environment"]
    assert set(_plan(train_time_budget_seconds=0)["batch"]["environment"]) == set(env_vars.TRAINING)


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder="dags/sim_to_real.py")
    assert not bag.import_errors, bag.import_errors
    return bag.dags["sim_to_real"]


def test_the_dag_has_exactly_the_contract_task_ids(dag):
    assert set(dag.task_ids) == set(task_ids.ALL)
    groups = {tid.split(".")[0] for tid in dag.task_ids if "." in tid}
    assert groups == set(task_ids.GROUPS)


def test_every_task_of_the_dag_belongs_to_one_stage_module_with_its_docs(dag):
    owners: dict[str, str] = {}
    for stage in STAGES:
        assert stage.TASK_IDS, stage.__name__
        assert isinstance(stage.DOC, str) and len(stage.DOC.strip()) > 100, stage.__name__
        for tid in stage.TASK_IDS:
            assert tid not in owners, f"{tid} declared by {owners.get(tid)} and {stage.__name__}"
            owners[tid] = stage.__name__
    assert set(owners) == set(dag.task_ids)
    for group_id in task_ids.GROUPS:  # every group shows its stage's docs in the UI
        group = dag.task_group.get_task_group_dict()[group_id]
        assert group.doc_md and group.doc_md.strip(), group_id


def test_every_stage_declares_its_form_fields_and_the_form_has_no_others(dag):
    declared = {}
    for stage in STAGES:
        fields = stage.params()
        assert isinstance(fields, dict), stage.__name__
        for name in fields:
            assert name not in declared, f"{name}: {declared.get(name)} and {stage.__name__}"
            declared[name] = stage.__name__
    assert set(declared) == set(dag.params)
    # each stage with a plan section that reads the form declares at least one field (checkpoint reads the
    # training's task)
    for stage in STAGES:
        if stage not in (stages.checkpoint,):
            assert stage.params(), stage.__name__


def test_every_lineage_source_is_a_task_of_the_dag(dag):
    from sim2real.orchestration import lineage

    sources = {**lineage.SOURCES, **lineage.HYPERPOD_SOURCES, **lineage.HYPERPOD_SCALING_SOURCES}
    assert set(sources.values()) <= set(dag.task_ids)
    assert lineage.SOURCES["evaluation"] == task_ids.READ_EVAL_REPORT


def test_form_task_names_are_the_workload_registry_names():
    from sim2real.orchestration.stages.run import build_params
    from sim2real.workloads.tasks import TASKS as REGISTRY

    assert set(build_params()["task"].schema["enum"]) == set(contract_tasks.TASKS) == set(REGISTRY)
    assert {k for k, v in REGISTRY.items() if v.kind == "isaaclab"} == set(contract_tasks.ISAACLAB_TASKS)


def test_progress_line_round_trips_and_is_what_the_batch_hook_finds():
    from sim2real.orchestration.hooks.batch import BatchTrainingHook

    line = progress.format_progress(iteration=12, max_iterations=40, timesteps=12288, mean_reward=-20.1,
                                    elapsed_s=15.24, eta_s=35.0)
    assert line == "[sim2real] iteration=12/40 timesteps=12288 mean_reward=-20.100 elapsed_s=15.2 eta_s=35.0"
    assert progress.parse_progress("2026-12-01T00:00:00Z " + line) == progress.Progress(12, 40, 12288, -20.1, 15.2, 35.0)
    assert progress.parse_progress("[sim2real] resumed from x at iteration 3") is None
    assert BatchTrainingHook.latest_progress(["noise", "ts " + line, "[sim2real] manifest s3://x"]) == line


def test_the_trainer_prints_the_contract_progress_line():
    import inspect

    from sim2real.workloads import train

    source = inspect.getsource(train)
    assert "format_progress(" in source and not re.search(r'"\{PREFIX\} iteration=', source)


def test_the_canary_stands_between_the_components_and_the_fleet_deployment(dag):
    up = {t: dag.get_task(t).upstream_task_ids for t in (task_ids.CANARY_MODEL_VERSION, task_ids.CANARY_VERDICT,
                                                          task_ids.DEPLOY_TO_ROBOTS)}
    # the verdict, then the person's review (which succeeds at once without canary_review), then the fleet
    assert {task_ids.CANARY_REVIEW, task_ids.DEPLOYMENT_COMPONENTS} <= up[task_ids.DEPLOY_TO_ROBOTS]
    assert task_ids.CANARY_VERDICT in dag.get_task(task_ids.CANARY_REVIEW).upstream_task_ids
    assert {task_ids.DEPLOY_TO_CANARY, task_ids.CANARY_MODEL_VERSION} <= up[task_ids.CANARY_VERDICT]
    assert task_ids.DEPLOYMENT_COMPONENTS in up[task_ids.CANARY_MODEL_VERSION]
    # a failed or rolled back canary stops the fleet deployment
    assert dag.get_task(task_ids.DEPLOY_TO_ROBOTS).trigger_rule == "all_success"
    verdict = dag.get_task(task_ids.CANARY_VERDICT)
    assert dag.get_task(task_ids.DEPLOY_TO_CANARY).deferrable and verdict.deferrable
    assert verdict.execution_timeout.total_seconds() >= (720 + 60) * 60  # the longest window and the rollback
    # the canary's deployment id, read from deploy_to_canary's result ({} without a canary)
    import jinja2

    class TI:
        def __init__(self, value):
            self.value = value

        def xcom_pull(self, **asked):
            return self.value if asked == {"task_ids": task_ids.DEPLOY_TO_CANARY} else "another task's"

    template = jinja2.Template(verdict.deployment_id)
    assert template.render(ti=TI({"deployment_id": "d-1", "devices": {}})) == "d-1"
    assert template.render(ti=TI({})) == "" and template.render(ti=TI(None)) == ""
