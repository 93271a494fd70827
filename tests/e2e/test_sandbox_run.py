"""End to end: the real sim_to_real DAG on a real Airflow (SQLite, dag.test) against the local sandbox.

Each test runs ``python -m sim2real.dev.demo`` in a fresh process (Airflow reads its config at import)
and reads the JSON summary it writes. The sandbox's clock runs as in the other end-to-end tests (status steps
0.05 s apart, polls every second, first retry after a second): the checks read what the run did, not how fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def start_demo(folder: Path, *args: str) -> Callable[[], tuple[subprocess.CompletedProcess, dict]]:
    """Start ``python -m sim2real.dev.demo <args>`` now, its Airflow home and summary in ``folder``; return a function
    that waits for it (1100 s at most from now) and returns ``(the completed process, the JSON summary or {})``.

    A file with several runs starts them all in a module fixture (:func:`start_demos`), so that one run's waits
    (polls, the sandbox's status steps, training's time budget) overlap the others' work.
    """
    folder.mkdir(parents=True, exist_ok=True)
    out, stdout, stderr = folder / "summary.json", folder / "stdout.txt", folder / "stderr.txt"
    env = {**os.environ, "SIM2REAL_POLL_SECONDS": "1", "SIM2REAL_RETRY_DELAY_SECONDS": "1"}
    with stdout.open("w") as fo, stderr.open("w") as fe:  # files, not pipes: a full pipe would stall the run
        proc = subprocess.Popen(
            [sys.executable, "-m", "sim2real.dev.demo", "--home", str(folder / "airflow"), "--json-out", str(out),
             "--step-seconds", "0.05", "--no-canary", *args],  # a test's --conf may still name a canary
            stdout=fo, stderr=fe, text=True, env=env,
        )

    deadline = time.monotonic() + 1100

    def finish() -> tuple[subprocess.CompletedProcess, dict]:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout.read_text(), stderr.read_text())
        return done, (json.loads(out.read_text()) if out.exists() else {})

    return finish


def start_demos(folder: Path, runs: dict[str, tuple[str, ...]]) -> dict[str, Callable[[], tuple]]:
    """For each ``name -> demo arguments``, a function that starts the run (:func:`start_demo`, in
    ``folder/<name>``) when its test first asks for it and waits for it. One run at a time: in ``make test`` the
    fault replay's three processes run beside these files on 2 cores, and three runs started at once there made the
    replay exceed its 20 minutes (it takes about 6 beside one run)."""
    def when_asked(name: str, args: tuple[str, ...]) -> Callable[[], tuple]:
        started: list[Callable[[], tuple]] = []

        def finish() -> tuple:
            if not started:
                started.append(start_demo(folder / name, *args))
            return started[0]()
        return finish
    return {name: when_asked(name, args) for name, args in runs.items()}


def run_demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the demo and wait for it (:func:`start_demo`)."""
    return start_demo(tmp_path, *args)()


def states(summary: dict) -> dict[str, str]:
    return {task: state for task, state, _ in summary["tasks"]}


def test_whole_loop_succeeds_with_a_consistent_lineage(tmp_path):
    # The gate threshold is lowered: this test checks the loop, not the toy policy's quality
    # (the gate itself is unit-tested; the default threshold is what `make demo` uses), and training gets 2 PPO
    # iterations (bounded by iterations, not seconds: a busy machine trains the same): enough for a checkpoint and a
    # training curve (an episode of Reacher-v5 ends within the first rollout; `make demo` trains 100 iterations for
    # its gate); 20 evaluation episodes (the form's 100 estimate the success rate, which this test does not judge).
    # The release goes to the canary group (robot 1) first: its 10 field episodes in the demo's mild gap decide, at a
    # field threshold of 0 (promoted whatever the toy policy scores), then the fleet group. The canary's robot records
    # each episode's data (--field-round): the field data DAG publishes them as a field dataset version, and the loop
    # runs again with that version in its fine-tune; the checks below read that second run, the first is checked too.
    proc, summary = run_demo(tmp_path, "--seed", "3", "--eval-seed", "2000", "--field-episodes", "10", "--field-round",
                             "--conf",
                             '{"min_success_rate": 0.0, "max_iterations": 2, "train_time_budget_seconds": 300, '
                             '"eval_episodes": 20, "canary_thing_group_name": "sim2real-robots-canary", '
                             '"canary_min_episodes": 10, "canary_window_minutes": 10, "field_min_success_rate": 0.0}')
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert summary["state"] == "success"
    # Field data back into training: the first run's canary robot (robot 1) recorded its 10 episodes' data; they are
    # the first field dataset version, and the second run's fine-tune took that version (the sandbox's
    # TransformDataset read the manifest and checked every data file's sha256 before the pipeline went on).
    rnd = summary["field_round"]
    assert rnd["first_run_state"] == "success" and rnd["publish_state"] == "success", rnd
    assert [e["event"] for e in rnd["first_run_notifications"]] == ["approval_needed", "deployed"]
    dataset = rnd["dataset"]
    assert dataset["episodes"] == dataset["new_episodes"] == 10 and dataset["parent_version"] is None, dataset
    assert dataset["manifest_uri"] == (f"s3://sim2real-artifacts-123456789012/field/datasets/"
                                       f"{dataset['dataset_version']}/manifest.json")
    used = summary["lineage"]["stages"]["field_dataset"]
    assert used["dataset_version"] == dataset["dataset_version"] and used["manifest_uri"] == dataset["manifest_uri"]
    assert used["episodes"] == 10 and used["frames"] == dataset["frames"] > 10, used
    assert summary["lineage"]["params"]["field_dataset_version"] == "latest"
    assert f"field dataset {dataset['dataset_version']}" in proc.stdout.lower() or dataset["dataset_version"] in proc.stdout
    # The run note's in-process API logs in nobody: no generated admin password in the demo's output (before:
    # "Simple auth manager | Password for user 'admin': ..." in every demo's log).
    assert "Password for user" not in proc.stdout + proc.stderr
    # The provider's connection wrapper says "credentials retrieved from login and password" at INFO on every hook
    # (83 lines in one demo): the demo's Airflow gets the deployments' [logging] namespace_levels too.
    assert "credentials retrieved from" not in proc.stdout + proc.stderr
    assert summary["run_note"], "the in-process API wrote no note"
    tasks = states(summary)
    # The training_backend branch skips the HyperPod path on the default (Batch) backend.
    # The HyperPod branch is skipped whole, its scale-down teardown included (it must not resize a cluster
    # this Batch run never scaled up); so is the sweep path of a run without a sweep, and the retraining round
    # (plan_next_round runs only when the gate failed, next_round after it).
    from sim2real.contract import task_ids as ids

    assert all(s == ("skipped" if t in ids.HYPERPOD or t.startswith("hyperpod_eks.") or t in ids.SWEEP
                     or t in (ids.PLAN_NEXT_ROUND, ids.NEXT_ROUND) else "success")
               for t, s in tasks.items()), tasks
    # The actual cost is known: the Batch job's run time at the estimate's price.
    actual = summary["lineage"]["cost_actual"]
    assert actual and actual["unknown"] == [] and actual["items"][0]["hours"] > 0, actual
    chain = summary["lineage"]["chain"]
    # Without a sweep the lineage lists the run's one policy as its only candidate.
    (only,) = summary["lineage"]["candidates"]
    assert summary["lineage"]["sweep"] is None and only["won"] and only["batch_job_id"] == chain["batch_job_id"]
    assert chain["image_digest"].startswith("sha256:") and "@sha256:" in chain["image_uri"]
    assert chain["batch_job_id"]
    assert chain["checkpoint_uri"].startswith(f"s3://sim2real-artifacts-123456789012/runs/{summary['run_key']}/")
    assert len(chain["checkpoint_sha256"]) == 64
    # The demo recomputed the sha256 of the checkpoint object in sandbox S3 and compared it.
    assert any(c.startswith("ok: sha256") for c in summary["checks"]), summary["checks"]
    assert 0.0 <= chain["success_rate"] <= 1.0
    lo, hi = chain["success_rate_ci95"]
    assert lo <= chain["success_rate"] <= hi
    assert ":pipeline/sim2real-groot-finetune/execution/" in chain["pipeline_execution_arn"]
    assert chain["model_approval_status"] == "Approved"
    assert chain["deployment_id"]
    assert chain["device_statuses"] and set(chain["device_statuses"].values()) == {"SUCCEEDED"}
    evaluation = summary["lineage"]["stages"]["evaluation"]
    assert evaluation["seeds"][0] == 2000 and evaluation["checkpoint_sha256"] == chain["checkpoint_sha256"]
    assert "[sandbox:emulated]" in proc.stdout + proc.stderr
    assert "finished in" in proc.stdout
    # Real SNS messages (sandbox topic → SQS inbox): approval needed, then deployed; no failure.
    events = [note["event"] for note in summary["notifications"]]
    assert events == ["approval_needed", "deployed"], events
    assert chain["deployment_id"] in summary["notifications"][1]["message"]
    assert "--model-approval-status Approved" in summary["notifications"][0]["message"]
    # Asset events carry the lineage's key facts; the lineage matches its JSON schema.
    extras = {event["asset"]: event["extra"] for event in summary["asset_events"]}
    assert extras["sim2real_rl_checkpoint"]["sha256"] == chain["checkpoint_sha256"]
    assert extras["sim2real_rl_checkpoint"]["checkpoint_uri"] == chain["checkpoint_uri"]
    assert extras["sim2real_eval_report"]["success_rate"] == chain["success_rate"]
    assert extras["sim2real_approved_model_package"]["model_package_arn"] == chain["model_package_arn"]
    assert {e["run_key"] for e in extras.values()} == {summary["run_key"]}
    from sim2real.orchestration.lineage import lineage_errors

    assert lineage_errors(summary["lineage"]) == []
    # The cost estimate prepare_run checked against max_budget_usd is in the lineage.
    cost = summary["lineage"]["cost_estimate"]
    assert 0 < cost["total_usd"] <= cost["max_budget_usd"] and cost["price_source"].startswith("AWS on-demand")
    # MLflow (the sandbox's local tracking server): the run's parent run and one child run per stage, each closed
    # with its stage's outcome (read back from the server by the demo); the training and evaluation logged into
    # their child runs.
    tracked = summary["mlflow"]
    assert tracked["enabled"] and tracked["parent_run_id"] and tracked["parent_run_url"], tracked
    assert lineage_errors(summary["lineage"]) == [] and summary["lineage"]["mlflow"]["runs"] == tracked["runs"]
    assert set(tracked["runs"]) == {"rl_training", "evaluation", "vla_finetune"}, tracked
    assert tracked["statuses"] == {"parent": "FINISHED", "rl_training": "FINISHED", "evaluation": "FINISHED",
                                   "vla_finetune": "FINISHED"}, tracked
    assert {"mean_reward", "timesteps"} <= set(tracked["metrics"]["rl_training"]), tracked["metrics"]
    assert {"success_rate", "episode_success"} <= set(tracked["metrics"]["evaluation"]), tracked["metrics"]
    assert "[demo] MLflow run (extra link 'MLflow run')" in proc.stdout
    # The run folder's extra link (persisted by prepare_run) opens runs/<run_key>/ in the S3 console.
    assert summary["run_folder_link"] == (
        "https://console.aws.amazon.com/s3/buckets/sim2real-artifacts-123456789012?region=us-east-1"
        f"&prefix=runs%2F{summary['run_key']}%2F&showversions=false")
    # The report's pictures beside lineage.json, drawn from the run's TensorBoard events and eval report,
    # with write_lineage's extra links to them: in the sandbox a presigned URL of the object on its S3
    # (127.0.0.1), which a browser opens (the console links need AWS).
    from PIL import Image

    figures = summary["lineage"]["figures"]
    for name in ("training_curve", "eval_outcome"):
        assert figures[name]["uri"] == (f"s3://sim2real-artifacts-123456789012/runs/{summary['run_key']}"
                                        f"/report/{name}.png"), figures
        assert figures[name]["skipped_reason"] is None and figures[name]["points"] >= 1
        with Image.open(summary["figures"][name]["local_path"]) as img:
            assert img.format == "PNG" and img.size[0] >= 640
        link = summary["figure_links"][name]
        assert link.startswith("http://127.0.0.1:") and (
            f"/sim2real-artifacts-123456789012/runs/{summary['run_key']}/report/{name}.png?" in link), link
        assert summary["figure_link_fetch"][name] == {"status": 200, "content_type": "image/png", "png": True}
    assert figures["eval_outcome"]["points"] == evaluation["episodes"]
    assert figures["training_curve"]["source"].endswith(f"/runs/{summary['run_key']}/checkpoints/tensorboard/")
    # The run's note (set by write_lineage): stage table, success rate and interval against the threshold,
    # estimated vs actual cost, links; the gate at 0 is flagged, never changed.
    note = summary["run_note"]
    assert note and len(note) <= 1000, note
    assert f"**Success rate:** {chain['success_rate']:.3f}, 95% Wilson [{lo:.3f}, {hi:.3f}]" in note, note
    assert "threshold 0.000" in note and "Quality gate at 0" in note and "**Quality gate passed:**" in note
    assert f"estimated ${cost['total_usd']:.2f}" in note and f"actual ${actual['total_usd']:.2f}" in note
    # every stage succeeded or was skipped: a note too long for Airflow's 1000 characters (the gate-at-0 warning and
    # the canary's line here) keeps them as one row (render_run_note), else one row each
    assert "| stage | state | time (s) |" in note and ("| deployment | success |" in note
                                                       or "other stages (2 skipped) | success |" in note), note
    assert summary["lineage"]["params"]["min_success_rate"] == 0.0
    # sim_to_real's successful deployment is the deployed-model asset's event.
    deployed = extras["sim2real_deployed_model_package"]
    assert deployed["deployment_id"] == chain["deployment_id"] and deployed["model_package_arn"] == chain["model_package_arn"]
    assert deployed["devices"] == chain["device_statuses"] and deployed["run_key"] == summary["run_key"]
    # The canary: robot 1 ran the release first and reported its field episodes; the verdict promoted it, and the
    # record sets the field beside the simulation (lineage field, the picture, the note, MLflow).
    field = summary["lineage"]["field"]
    assert field["decision"] == "promote" and field["robots"].keys() == {"sim2real-robot-1"}, field
    assert field["field"]["episodes"] == 10 and field["simulation"]["episodes"] == evaluation["episodes"]
    assert field["gap_pp"] == round((field["field"]["success_rate"] - chain["success_rate"]) * 100, 1)
    assert sum(field["refused"].values()) == 0 and field["deployment_id"] != chain["deployment_id"]
    assert figures["sim_vs_field"]["points"] == 10 and figures["sim_vs_field"]["skipped_reason"] is None
    assert "**Field (canary, 1 robot):**" in note and "promoted to the fleet" in note
    assert {"field_success_rate", "sim_to_real_gap_pp"} <= set(tracked["metrics"]["parent"]), tracked["metrics"]
