"""The report task writes training_curve.png and eval_outcome.png beside lineage.json (moto S3), records
them in lineage.json (schema-checked), embeds them in lineage.md and persists their console links."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from moto import mock_aws
from PIL import Image

from sim2real.orchestration.stages.rounds import lineage_entry
from sim2real.contract import task_ids as ids
from sim2real.orchestration import plots
from sim2real.orchestration.lineage import lineage_errors
from sim2real.contract.stats import wilson_interval
from tests.orchestration.test_plots import write_scalars

BUCKET = "sim2real-test"
RUN_KEY = "sim-to-real-manual-2026-11-29t23-59-50-00-00-1a2b3c4d"
PREFIX = f"runs/{RUN_KEY}/"
SHA = "a" * 64


class Operator:
    do_xcom_push = True


class RunningTask:
    """The parts of the running task instance the report uses: XComs of upstream tasks (read) and of
    its own extra links (written)."""

    def __init__(self, outputs):
        self.outputs = outputs
        self.pushed = {}
        self.task = Operator()

    def xcom_pull(self, task_ids, key=None):
        """The task's return value, or (``key``) its XCom ``outputs[(task_ids, key)]``."""
        return self.outputs.get((task_ids, key) if key else task_ids)

    def xcom_push(self, key, value):
        self.pushed[key] = value


class DagRun:
    dag_id = "sim_to_real"
    run_id = "manual__2026-11-29T23:59:50+00:00"


def plan():
    return {"run_key": RUN_KEY, "bucket": BUCKET, "run_prefix": PREFIX, "run_uri": f"s3://{BUCKET}/{PREFIX}",
            "region": "us-east-1", "quality_gate": {"min_success_rate": 0.15, "on_lower_bound": False},
            "checkpoint": {"output_uri": f"s3://{BUCKET}/{PREFIX}checkpoints/", "task": "Reacher-v5"},
            "evaluation": {"report_uri": f"s3://{BUCKET}/{PREFIX}eval/report.json"}}


def manifest():
    """What the checkpoint sensor hands on (the trainer's manifest, verified)."""
    return {"schema_version": 1, "run_key": RUN_KEY, "task": "Reacher-v5", "sha256": SHA, "iteration": 3,
            "checkpoint_uri": f"s3://{BUCKET}/{PREFIX}checkpoints/agent_000003.pt", "timesteps": 3 * 64 * 4,
            "tensorboard_uri": f"s3://{BUCKET}/{PREFIX}checkpoints/tensorboard/", "rollouts": 64, "num_envs": 4,
            "verified_sha256": True}


def evaluation():
    lo, hi = wilson_interval(3, 10)
    return {"task": "Reacher-v5", "episodes": 10, "successes": 3, "success_rate": 0.3, "ci95": [lo, hi],
            "checkpoint_sha256": SHA, "returns": [float(i) for i in range(10)],
            "successes_per_episode": [i >= 7 for i in range(10)], "seeds": list(range(10)),
            "report_uri": f"s3://{BUCKET}/{PREFIX}eval/report.json"}


@pytest.fixture()
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(scope="module")
def events_dir(tmp_path_factory):
    """skrl-style reward events of a 3-iteration run (64 rollouts per iteration)."""
    folder = tmp_path_factory.mktemp("tensorboard")
    write_scalars(folder, [(64, -48.5), (128, -43.25), (192, -45.0)])
    write_scalars(folder, [(64, -53.5), (128, -46.25), (192, -49.75)], tag=plots.REWARD_MIN_TAG)
    write_scalars(folder, [(64, -45.5), (128, -40.0), (192, -42.0)], tag=plots.REWARD_MAX_TAG)
    return folder


def upload_events(s3, folder):
    for path in plots.find_event_files(folder):
        s3.upload_file(str(path), BUCKET, f"{PREFIX}checkpoints/tensorboard/{path.name}")


def write(ti):
    from sim2real.orchestration.report import write_run_report

    p = plan()
    return write_run_report(rounds_entry=lineage_entry, plan=p, params={"seed": 1}, dag_run=DagRun(), ti=ti)


def stored(s3, key):
    return s3.get_object(Bucket=BUCKET, Key=key)


def test_a_full_run_gets_both_pictures_recorded_linked_and_embedded(s3, events_dir):
    upload_events(s3, events_dir)
    ti = RunningTask({
        ids.BATCH_TRAIN_POLICY: {"job_id": "712d25ad-4769-4599-bcfc-4605b0af382a"},
        ids.WAIT_FOR_CHECKPOINT: manifest(),
        ids.READ_EVAL_REPORT: evaluation(),
        "quality_gate": {"passed": True, "reason": "success_rate 0.300 >= threshold 0.150",
                         "metric": "success_rate", "value": 0.3, "threshold": 0.15},
    })
    out = write(ti)
    curve, outcome = f"{PREFIX}report/training_curve.png", f"{PREFIX}report/eval_outcome.png"
    assert out["figures"] == {"training_curve": f"s3://{BUCKET}/{curve}", "eval_outcome": f"s3://{BUCKET}/{outcome}"}
    for key, size in ((curve, plots.TRAINING_CURVE_SIZE), (outcome, plots.EVAL_OUTCOME_SIZE)):
        obj = stored(s3, key)
        assert obj["ContentType"] == "image/png"
        with Image.open(io.BytesIO(obj["Body"].read())) as img:
            assert img.format == "PNG" and img.size == size

    lineage = json.loads(stored(s3, f"{PREFIX}lineage.json")["Body"].read())
    assert lineage_errors(lineage) == []
    assert lineage["figures"]["training_curve"] == {
        "uri": f"s3://{BUCKET}/{curve}", "source": f"s3://{BUCKET}/{PREFIX}checkpoints/tensorboard/",
        "points": 3, "skipped_reason": None}
    assert lineage["figures"]["eval_outcome"] == {
        "uri": f"s3://{BUCKET}/{outcome}", "source": f"s3://{BUCKET}/{PREFIX}eval/report.json",
        "points": 10, "skipped_reason": None}

    md = stored(s3, f"{PREFIX}lineage.md")["Body"].read().decode()
    assert "![Training curve](report/training_curve.png)" in md  # relative to lineage.md
    assert "![Evaluation outcome](report/eval_outcome.png)" in md

    from sim2real.orchestration.links.s3 import S3EvalOutcomeLink, S3TrainingCurveLink

    assert S3TrainingCurveLink().format_link(**ti.pushed[S3TrainingCurveLink.key]) == (
        "https://console.aws.amazon.com/s3/object/sim2real-test?region=us-east-1"
        f"&prefix=runs%2F{RUN_KEY}%2Freport%2Ftraining_curve.png")
    assert S3EvalOutcomeLink().format_link(**ti.pushed[S3EvalOutcomeLink.key]).endswith(
        f"&prefix=runs%2F{RUN_KEY}%2Freport%2Feval_outcome.png")


def test_training_that_never_ran_gets_no_curve_and_the_reason(s3, caplog):
    """Training never ran (no XCom, no events): no training curve, the reason in the log and the lineage;
    the evaluation picture and the lineage are still written."""
    ti = RunningTask({"evaluate.read_eval_report": evaluation()})
    with caplog.at_level("WARNING", logger="sim2real.orchestration.report"):
        out = write(ti)
    assert out["figures"]["training_curve"] is None and out["figures"]["eval_outcome"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert f"{PREFIX}report/training_curve.png" not in keys and f"{PREFIX}report/eval_outcome.png" in keys
    lineage = json.loads(stored(s3, f"{PREFIX}lineage.json")["Body"].read())
    assert lineage_errors(lineage) == []
    entry = lineage["figures"]["training_curve"]
    assert entry["uri"] is None and entry["points"] is None
    assert entry["skipped_reason"] == (
        "training did not run (no output from train.train_policy); no TensorBoard event files "
        f"(events.out.tfevents.*) under s3://{BUCKET}/{PREFIX}checkpoints/tensorboard/")
    assert "training_curve not drawn: training did not run" in caplog.text
    md = stored(s3, f"{PREFIX}lineage.md")["Body"].read().decode()
    assert "Training curve: not drawn — training did not run" in md
    from sim2real.orchestration.links.s3 import S3EvalOutcomeLink, S3TrainingCurveLink

    assert S3TrainingCurveLink.key not in ti.pushed and S3EvalOutcomeLink.key in ti.pushed


def test_a_failed_training_without_manifest_still_gets_the_curve_of_its_events(s3, events_dir):
    """No checkpoint manifest (the training failed after some checkpoints): the events the trainer uploaded
    under the plan's checkpoints/tensorboard/ are drawn; no evaluation → no outcome picture."""
    upload_events(s3, events_dir)
    out = write(RunningTask({}))
    assert out["figures"]["training_curve"] == f"s3://{BUCKET}/{PREFIX}report/training_curve.png"
    lineage = json.loads(stored(s3, f"{PREFIX}lineage.json")["Body"].read())
    assert lineage_errors(lineage) == []
    assert lineage["figures"]["eval_outcome"]["skipped_reason"].startswith("evaluation did not run")


def test_a_picture_that_cannot_be_drawn_does_not_cost_the_lineage(s3):
    bad = {**evaluation(), "successes": 11}  # more successes than episodes
    out = write(RunningTask({"evaluate.read_eval_report": bad}))
    assert out["figures"] == {"training_curve": None, "eval_outcome": None}
    lineage = json.loads(stored(s3, f"{PREFIX}lineage.json")["Body"].read())
    reason = lineage["figures"]["eval_outcome"]["skipped_reason"]
    assert reason.startswith("could not be drawn or stored") and "'successes' must be an integer in [0, 10]" in reason


def test_the_plugin_registers_the_picture_links():
    import importlib.util

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("sim2real_plugin", REPO_ROOT / "plugins" / "sim2real_plugin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = {link.name for link in module.Sim2RealPlugin.operator_extra_links}
    assert {"Training curve", "Evaluation outcome", "S3 run folder"} <= names
    from sim2real.orchestration.links.s3 import FIGURE_LINKS

    # every picture's link, the field picture's included ("extra link: None" in the demo before)
    assert {link.name for link in FIGURE_LINKS.values()} <= names and "Simulation vs field" in names


def test_a_canary_run_gets_the_sim_vs_field_picture_and_the_field_entry(s3):
    """The canary rolled back (its XCom canary_verdict is pushed whichever way it decides): the picture is drawn beside the
    others, the lineage's field entry sets the robots beside the evaluation; a run without a canary draws none."""
    from tests.orchestration.test_lineage import _canary_verdict

    from sim2real.orchestration.report import write_run_report

    verdict = _canary_verdict("roll_back", n=10, successes=3, rate=0.3, ci95=list(wilson_interval(3, 10)),
                              robots={"robot-1": {"n": 10, "successes": 3, "interventions": 0}})
    ti = RunningTask({ids.READ_EVAL_REPORT: evaluation(), (ids.CANARY_VERDICT, "canary_verdict"): verdict})
    p = {**plan(), "deploy": {"canary_thing_group_name": "robots-canary"}}
    out = write_run_report(rounds_entry=lineage_entry, plan=p, params={}, dag_run=DagRun(), ti=ti)
    key = f"{PREFIX}report/sim_vs_field.png"
    assert out["figures"]["sim_vs_field"] == f"s3://{BUCKET}/{key}"
    with Image.open(io.BytesIO(stored(s3, key)["Body"].read())) as img:
        assert img.size == plots.SIM_VS_FIELD_SIZE
    lineage = json.loads(stored(s3, f"{PREFIX}lineage.json")["Body"].read())
    assert lineage["figures"]["sim_vs_field"]["points"] == 10 and lineage["field"]["gap_pp"] == 0.0
    assert lineage_errors(lineage) == []
    assert "![Simulation vs field](report/sim_vs_field.png)" in stored(s3, f"{PREFIX}lineage.md")["Body"].read().decode()
    from sim2real.orchestration.links.s3 import FIGURE_LINKS

    link = FIGURE_LINKS["sim_vs_field"]
    assert link().format_link(**ti.pushed[link.key]) == (
        f"https://console.aws.amazon.com/s3/object/{BUCKET}?region=us-east-1&prefix=runs%2F{RUN_KEY}%2Freport%2F"
        "sim_vs_field.png")
    # no canary: no such picture (not even as skipped), no field entry
    out = write_run_report(rounds_entry=lineage_entry, plan=plan(), params={}, dag_run=DagRun(),
                           ti=RunningTask({ids.READ_EVAL_REPORT: evaluation()}))
    assert "sim_vs_field" not in out["figures"]
