"""The run report's pictures (sim2real.orchestration.plots): series read from real TensorBoard event files, PNGs drawn from them."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from sim2real.orchestration import plots
from sim2real.contract.stats import wilson_interval
from tests.workloads.conftest import trained_dir, trained_run  # noqa: F401 - the toy training run (real skrl events)

RUN_KEY = "sim-to-real-manual-2026-11-29t23-59-50-00-00-1a2b3c4d"


def raw_events(folder, tag):
    """(step, value) of ``tag`` straight from the event records (no EventAccumulator), in file order."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out = []
    for path in plots.find_event_files(folder):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    number = value.simple_value if value.HasField("simple_value") else \
                        float(tensor_util.make_ndarray(value.tensor))
                    out.append((event.step, number))
    return out


def write_scalars(folder, points, tag=plots.REWARD_TAG):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder))
    for step, value in points:
        writer.add_scalar(tag, value, step)
    writer.close()


def png_size(png: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(png)) as img:
        assert img.format == "PNG"
        img.load()
        return img.size


def test_the_reward_series_of_a_real_training_run_is_what_skrl_logged(trained_dir):  # noqa: F811
    """The toy run (2 iterations x 64 rollouts x 4 envs) logs one reward point per iteration at skrl's
    timestep; the series is every logged point, in order."""
    events = trained_dir / "tensorboard"
    scalars = plots.read_scalars(events, (plots.REWARD_TAG, plots.REWARD_MIN_TAG, plots.REWARD_MAX_TAG))
    series = plots.reward_series(scalars)
    expected = raw_events(events, plots.REWARD_TAG)
    assert [s for s, _ in expected] == [64, 128]
    assert series.steps == (64, 128)
    assert series.values == pytest.approx([v for _, v in expected], abs=0, rel=1e-7)
    low, high = scalars[plots.REWARD_MIN_TAG], scalars[plots.REWARD_MAX_TAG]
    assert all(lo <= mean <= hi for lo, mean, hi in zip(low.values, series.values, high.values, strict=True))


def test_training_curve_from_real_events_plots_iterations_and_values(trained_dir):  # noqa: F811
    import json

    manifest = json.loads((trained_dir / "manifest.json").read_text())
    scalars = plots.read_scalars(manifest["tensorboard_uri"],
                                 (plots.REWARD_TAG, plots.REWARD_MIN_TAG, plots.REWARD_MAX_TAG))
    fig = plots.training_curve_figure(scalars, run_key=RUN_KEY, task=manifest["task"],
                                      rollouts=manifest["rollouts"], num_envs=manifest["num_envs"])
    ax = fig.axes[0]
    line = ax.lines[0]
    assert list(line.get_xdata()) == [1.0, 2.0]  # PPO iterations = step / rollouts
    assert list(line.get_ydata()) == list(scalars[plots.REWARD_TAG].values)
    assert ax.get_xlabel() == "PPO iteration (64 steps × 4 envs each)"
    assert "reward" in ax.get_ylabel() and RUN_KEY in ax.get_title() and "Reacher-v5" in ax.get_title()

    png = plots.training_curve_png(manifest["tensorboard_uri"], run_key=RUN_KEY, task=manifest["task"],
                                   rollouts=manifest["rollouts"], num_envs=manifest["num_envs"])
    assert png_size(png) == plots.TRAINING_CURVE_SIZE
    assert png == plots.training_curve_png(manifest["tensorboard_uri"], run_key=RUN_KEY, task=manifest["task"],
                                           rollouts=manifest["rollouts"], num_envs=manifest["num_envs"])


def test_known_values_across_a_resume_and_subfolders(tmp_path):
    """Two process starts (a resume rewrote step 3), one in a sub-folder as Isaac Lab runs upload them;
    a NaN (no episode ended yet) is dropped."""
    first, second = tmp_path / "tb", tmp_path / "tb" / "2026-01-02_09-30-00_ppo_torch"
    write_scalars(first, [(1, float("nan")), (2, -3.5), (3, -3.0)])
    write_scalars(second, [(3, -2.75), (4, -2.25), (5, 1.5)])
    series = plots.reward_series(plots.read_scalars(tmp_path / "tb"))
    assert series.steps == (2, 3, 4, 5)
    assert series.values == (-3.5, -2.75, -2.25, 1.5)  # the later write of step 3 wins
    fig = plots.training_curve_figure({plots.REWARD_TAG: series}, run_key=RUN_KEY, task="Reacher-v5")
    assert list(fig.axes[0].lines[0].get_xdata()) == [2, 3, 4, 5]
    assert fig.axes[0].get_xlabel() == "skrl timestep (environment steps per env)"


def test_events_under_an_s3_prefix(trained_dir):  # noqa: F811
    import boto3
    from moto import mock_aws

    with mock_aws():
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="sim2real-test")
        for path in plots.find_event_files(trained_dir / "tensorboard"):
            s3.upload_file(str(path), "sim2real-test", f"runs/k/checkpoints/tensorboard/{path.name}")
        s3.put_object(Bucket="sim2real-test", Key="runs/k/checkpoints/tensorboard/notes.txt", Body=b"not events")
        from_s3 = plots.read_scalars("s3://sim2real-test/runs/k/checkpoints/tensorboard/", s3_hook=S3Hook())
        local = plots.read_scalars(trained_dir / "tensorboard")
        assert from_s3 == local and from_s3[plots.REWARD_TAG].steps == (64, 128)
        with pytest.raises(plots.PlotDataMissing, match="no TensorBoard event files .* under s3://sim2real-test/"
                                                        "runs/other/"):
            plots.read_scalars("s3://sim2real-test/runs/other/checkpoints/tensorboard/", s3_hook=S3Hook())


def test_missing_events_or_tag_say_what_was_looked_for(tmp_path):
    with pytest.raises(plots.PlotDataMissing, match="no TensorBoard event files"):
        plots.read_scalars(tmp_path / "absent")
    write_scalars(tmp_path / "tb", [(1, 0.5)], tag="Loss / Policy loss")
    with pytest.raises(plots.PlotDataMissing, match="no finite 'Reward / Total reward \\(mean\\)' value"):
        plots.training_curve_png(tmp_path / "tb", run_key=RUN_KEY, task="Reacher-v5")


def report(episodes=20, successes=7, per_episode=True):
    lo, hi = wilson_interval(successes, episodes)
    out = {"task": "Reacher-v5", "episodes": episodes, "successes": successes, "success_rate": successes / episodes,
           "ci95": [lo, hi], "seeds": list(range(2000, 2000 + episodes))}
    if per_episode:
        out["returns"] = [-10.0 + 0.5 * i for i in range(episodes)]
        out["successes_per_episode"] = [i < successes for i in range(episodes)]
    return out


def test_eval_outcome_draws_rate_interval_threshold_and_each_episode():
    rep = report()
    fig = plots.eval_outcome_figure(rep, run_key=RUN_KEY, threshold=0.15)
    left, right = fig.axes[:2]
    assert list(left.lines[0].get_ydata()) == [0.35]
    (segment,) = left.collections[0].get_segments()  # the Wilson interval's error bar
    assert [y for _, y in segment] == pytest.approx(rep["ci95"])
    threshold = [ln for ln in left.lines if ln.get_linestyle() == "--"]
    assert len(threshold) == 1 and list(threshold[0].get_ydata()) == [0.15, 0.15]
    assert "passed" in left.get_title()
    bars = right.patches
    assert [b.get_height() for b in bars] == rep["returns"]
    colors = {tuple(b.get_facecolor()) for b in bars[:7]}, {tuple(b.get_facecolor()) for b in bars[7:]}
    assert len(colors[0]) == 1 and len(colors[1]) == 1 and colors[0] != colors[1]
    assert "success rate" in left.get_ylabel() and "reward" in right.get_ylabel()
    png = plots.eval_outcome_png(rep, run_key=RUN_KEY, threshold=0.15)
    assert png_size(png) == plots.EVAL_OUTCOME_SIZE
    assert png == plots.eval_outcome_png(rep, run_key=RUN_KEY, threshold=0.15)


def test_eval_outcome_on_the_lower_bound_fails_and_without_per_episode_data():
    rep = report(episodes=10, successes=2, per_episode=False)
    del rep["ci95"]  # recomputed from the counts (Wilson)
    fig = plots.eval_outcome_figure(rep, run_key=RUN_KEY, threshold=0.15, gate_metric="ci95_lower")
    left, right = fig.axes[:2]
    assert "failed" in left.get_title()
    (segment,) = left.collections[0].get_segments()
    assert [y for _, y in segment] == pytest.approx(wilson_interval(2, 10))
    assert not right.axison and "2 of 10 episodes succeeded" in right.texts[0].get_text()
    assert png_size(plots.eval_outcome_png(rep, run_key=RUN_KEY, threshold=None)) == plots.EVAL_OUTCOME_SIZE


@pytest.mark.parametrize("field, value, match", [
    ("episodes", 0, "'episodes' must be an integer >= 1"),
    ("successes", 21, r"'successes' must be an integer in \[0, 20\]"),
    ("successes", None, "'successes'"),
])
def test_a_bad_report_is_refused_naming_the_field(field, value, match):
    rep = report()
    rep[field] = value
    with pytest.raises(ValueError, match=match):
        plots.eval_outcome_png(rep, run_key=RUN_KEY, threshold=0.15)


def test_bad_threshold_or_metric_is_refused():
    with pytest.raises(ValueError, match="threshold must be a success rate in"):
        plots.eval_outcome_png(report(), run_key=RUN_KEY, threshold=15)
    with pytest.raises(ValueError, match="gate_metric must be"):
        plots.eval_outcome_png(report(), run_key=RUN_KEY, threshold=0.1, gate_metric="mean_return")


def test_sim_vs_field_draws_both_rates_their_intervals_the_gap_and_each_robot():
    from sim2real.orchestration.field import field_summary

    sim = {"success_rate": 0.9, "ci95": list(wilson_interval(90, 100)), "successes": 90, "episodes": 100}
    docs = [{"model_version": "v", "thing_name": t, "outcome": {"success": s}, "interventions": 0,
             "action_latency_ms": {"p95": 2.0, "max": 3.0}}
            for t, wins in (("robot-1", 6), ("robot-2", 3)) for s in [True] * wins + [False] * (10 - wins)]
    field = field_summary(docs)["v"]
    fig = plots.sim_vs_field_figure(sim, field, run_key=RUN_KEY, field_threshold=0.5)
    ax = fig.axes[0]
    assert [list(ln.get_ydata()) for ln in ax.lines[:1]] == [[0.9]]
    segments = [seg for c in ax.collections for seg in c.get_segments()]
    assert [[y for _, y in seg] for seg in segments] == [pytest.approx(list(wilson_interval(90, 100))),
                                                         pytest.approx(list(wilson_interval(9, 20)))]
    robots = sorted(list(ln.get_ydata()) for ln in ax.lines if ln.get_color() == "#7f7f7f")
    assert robots == [[0.3], [0.6]]
    texts = [t.get_text() for t in ax.texts]
    assert "gap -45.0 pp" in texts and "robot-1" in texts and any("9/20 episodes" in t for t in texts)
    assert [list(ln.get_ydata()) for ln in ax.lines if ln.get_linestyle() == "--"] == [[0.5, 0.5]]
    png = plots.sim_vs_field_png(sim, field, run_key=RUN_KEY, field_threshold=0.5)
    assert png_size(png) == plots.SIM_VS_FIELD_SIZE and png == plots.sim_vs_field_png(sim, field, run_key=RUN_KEY,
                                                                                       field_threshold=0.5)
    with pytest.raises(ValueError, match="no field episode"):
        plots.sim_vs_field_png(sim, {"n": 0}, run_key=RUN_KEY)
    with pytest.raises(ValueError, match="simulation: success rate 0.2 is outside"):
        plots.sim_vs_field_png({**sim, "success_rate": 0.2}, field, run_key=RUN_KEY)
