"""End to end: a 3-candidate sweep in one run of the real sim_to_real DAG (dag.test, SQLite) against the sandbox.

Toy size (2 PPO iterations per candidate, bounded by iterations, not seconds, so a busy machine trains the same;
10 evaluation episodes; the gate open): the test checks the sweep's
orchestration — three Batch jobs on distinct prefixes, the best Wilson lower bound going on, the lineage listing
every candidate — not the policies' quality. Each of the file's three runs starts when its test asks for it (the ``sweeps`` fixture).
The first run fine-tunes GR00T N1.7 (its gated backbone's Hugging Face token in the sandbox's Secrets Manager): the
token must appear nowhere in what the run leaves.
"""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from .test_sandbox_run import start_demos, states

#: Each run starts when its test asks for it (``start_demos``), one after another.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

TOY = '"min_success_rate": 0.0, "max_iterations": 2, "train_time_budget_seconds": 300, "eval_episodes": 10'
SEEDS = ("--seed", "3", "--eval-seed", "2000")
BUCKET = "sim2real-artifacts-123456789012"


#: The first run's GR00T version and Hugging Face token secret (provisioned by the sandbox: ``HF_TOKEN_SECRET_ID``).
GROOT_N17 = '"groot_version": "n1.7", "hf_token_secret_id": "sim2real-groot/hf-token"'


@pytest.fixture(scope="module")
def sweeps_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sweeps")


@pytest.fixture(scope="module")
def sweeps(sweeps_folder):
    """The file's three sweep runs (each its own process, sandbox and Airflow home), each started when its test asks."""
    return start_demos(sweeps_folder, {
        "all_succeed": ("--sweep", *SEEDS, "--record-dir", str(sweeps_folder / "all_succeed" / "records"),
                        "--conf", "{" + TOY + ", " + GROOT_N17 + "}"),
        "c1_fails": ("--sweep", "--fail-candidate", "1", "--no-mlflow", *SEEDS, "--conf", "{" + TOY + "}"),
        "c1_fails_all_needed": ("--sweep", "--fail-candidate", "1", "--no-mlflow", *SEEDS, "--conf",
                                "{" + TOY + ', "sweep_min_candidates": 3, "run_vla_finetune": false, '
                                '"deploy_to_edge": false}'),
    })


def test_a_sweep_trains_three_candidates_and_the_best_lower_bound_goes_on(sweeps):
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.candidates import best_candidate
    from sim2real.orchestration.lineage import lineage_errors

    proc, summary = sweeps["all_succeed"]()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert summary["state"] == "success"
    tasks = states(summary)
    # The sweep path ran; the single-candidate Batch path and HyperPod were skipped.
    assert tasks[ids.SWEEP_CHECK_CAPACITY] == "success" and tasks[ids.SWEEP_PICK_BEST] == "success"
    assert tasks[ids.BATCH_CHECK_CAPACITY] == "skipped" and tasks[ids.BATCH_TRAIN_POLICY] == "skipped"
    for task_id in (ids.SWEEP_WAIT_FOR_SLOT, ids.SWEEP_SUBMIT_TRAINING, ids.SWEEP_TRAIN_POLICY,
                    ids.SWEEP_WAIT_FOR_CHECKPOINT, ids.SWEEP_RUN_EVALUATION, ids.SWEEP_READ_EVAL_REPORT):
        assert summary["mapped_tasks"][task_id] == ["success"] * 3, (task_id, summary["mapped_tasks"])
    lineage = summary["lineage"]
    assert lineage_errors(lineage) == []
    key = summary["run_key"]
    candidates = lineage["candidates"]
    # three Batch jobs, each on its own prefix, with the params it was given
    assert [c["candidate"] for c in candidates] == ["c0", "c1", "c2"]
    assert len({c["batch_job_id"] for c in candidates}) == 3 and all(c["batch_job_id"] for c in candidates)
    for i, cand in enumerate(candidates):
        assert cand["checkpoint_uri"].startswith(f"s3://sim2real-artifacts-123456789012/runs/{key}/candidates/c{i}/")
        assert cand["params"]["seed"] == 3 + i and len(cand["checkpoint_sha256"]) == 64
        assert cand["episodes"] == 10 and cand["seeds_from"] == 2010  # after the run's own episodes 2000..2009
    assert len({c["checkpoint_sha256"] for c in candidates}) == 3
    # the demo re-hashed every candidate's checkpoint in sandbox S3
    assert sum(c.startswith("ok: candidate") for c in summary["checks"]) == 3, summary["checks"]
    # the best Wilson lower bound won (ties by the documented rule), and it is what went on
    expected = best_candidate([{"index": c["index"], "report": c} for c in candidates])["index"]
    assert lineage["sweep"]["winner"] == expected and [c["won"] for c in candidates].count(True) == 1
    winner = candidates[expected]
    assert winner["won"] and lineage["chain"]["checkpoint_sha256"] == winner["checkpoint_sha256"]
    assert lineage["chain"]["batch_job_id"] == winner["batch_job_id"]
    # the confirmation evaluation ran on the run's own episodes, on the winner's checkpoint
    evaluation = lineage["stages"]["evaluation"]
    assert evaluation["seeds"][0] == 2000 and evaluation["checkpoint_sha256"] == winner["checkpoint_sha256"]
    # the estimate and the actual cost count every candidate's job
    assert sum(i["stage"] == "training" for i in lineage["cost_estimate"]["items"]) == 3
    assert sum(i["stage"] == "training" for i in lineage["cost_actual"]["items"]) == 3
    assert lineage["cost_actual"]["unknown"] == []
    # each candidate has its own MLflow runs under the run's parent
    tracked = lineage["mlflow"]
    assert set(tracked["candidate_runs"]) == {"c0", "c1", "c2"}
    assert len({r for runs in tracked["candidate_runs"].values() for r in runs.values()}) == 6
    assert "Sweep candidates" in proc.stdout


def _texts(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), a gzip file also decompressed and a tar's members
    (``<path>!<member>``) read."""
    texts = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel, data = str(path.relative_to(folder)), path.read_bytes()
        texts[rel] = data
        if data[:2] == b"\x1f\x8b":
            texts[rel + "!gunzip"] = gzip.decompress(data)
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as archive:
                for member in archive.getmembers():
                    extracted = archive.extractfile(member) if member.isfile() else None
                    if extracted is not None:
                        texts[f"{rel}!{member.name}"] = extracted.read()
    return texts


def test_the_hugging_face_token_of_a_groot_n17_run_leaks_nowhere(sweeps, sweeps_folder):
    """The first run fine-tunes GR00T N1.7 with the sandbox's fake Hugging Face token (Secrets Manager,
    ``sim2real-groot/hf-token``). Searched for the token: the Airflow home (the metadata database with XComs, DAG
    run notes and conf; the MLflow server's store, artifacts and log), the demo's stdout and stderr (dag.test's task
    and trigger logs) and JSON summary, the sandbox's request and event logs, the pipeline definitions, execution parameters
    and steps, the model packages, and every S3 object under runs/ (lineage, reports, checkpoints, model)."""
    from sim2real.dev.sandbox.provision import HF_TOKEN_SECRET_ID, SANDBOX_HF_TOKEN

    proc, summary = sweeps["all_succeed"]()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    folder, key = sweeps_folder / "all_succeed", summary["run_key"]
    records = folder / "records"
    # the run fine-tuned N1.7 naming the secret: the preflight checked it (DescribeSecret), the pipeline got its name
    assert summary["lineage"]["params"]["groot_version"] == "n1.7"
    requests = [json.loads(line) for line in (records / "requests.jsonl").read_text().splitlines()]
    assert {"service": "secretsmanager", "action": "DescribeSecret",
            "body": json.dumps({"SecretId": HF_TOKEN_SECRET_ID})} in requests
    # Airflow never reads the token; and the sandbox's pipeline plays its steps without running the fine-tune's
    # entry (sim2real.workloads.groot.finetune_entry), so no job reads it either (tests/pipelines/
    # test_hf_token_never_leaks.py runs that entry against Secrets Manager)
    assert not [r for r in requests if r["action"] == "GetSecretValue"]
    sagemaker = json.loads((records / "sagemaker.json").read_text())
    (execution,) = [e for e in sagemaker["pipelines"]["sim2real-groot-finetune"]["executions"]
                    if {"Name": "RunKey", "Value": key} in e["parameters"]]
    assert {"Name": "HfTokenSecretId", "Value": HF_TOKEN_SECRET_ID} in execution["parameters"]
    assert {"Name": "GrootVersion", "Value": "n1.7"} in execution["parameters"]
    assert {s["StepStatus"] for s in execution["steps"]} == {"Succeeded"}
    definition = sagemaker["pipelines"]["sim2real-groot-finetune"]["definition"]
    assert '"HF_TOKEN_SECRET_ID":{"Get":"Parameters.HfTokenSecretId"}' in definition.replace(" ", "")
    assert "sim2real-groot:n1.7-training" in definition
    texts = _texts(folder)
    # what is searched is there: task logs, the metadata and MLflow databases, the run's records and S3 objects
    # dag.test writes the task logs to the demo's output (stdout.txt; the Airflow home's logs/ stays empty): the
    # preflight's among them
    assert f"GR00T n1.7 base model s3://{BUCKET}/models/groot-base/n1.7/" in proc.stdout
    assert f"Hugging Face token secret {HF_TOKEN_SECRET_ID}" in proc.stdout and "airflow/airflow.db" in texts
    assert any(name.startswith("airflow/mlflow/") for name in texts)
    run = f"records/s3/runs/{key}/"
    assert {run + "lineage.json", run + "vla/model.tar.gz"} <= set(texts), sorted(texts)
    assert any(name.startswith(run) and name.endswith("report.json") for name in texts), sorted(texts)
    assert {"stdout.txt", "stderr.txt", "summary.json", "records/events.txt"} <= set(texts)
    leaked = sorted(name for name, data in texts.items() if SANDBOX_HF_TOKEN.encode() in data)
    assert not leaked, f"the Hugging Face token leaked into {leaked}"


def test_a_sweep_whose_candidate_fails_still_releases_the_best_survivor(sweeps):
    """Candidate c1's Batch job fails (as when its instance is lost): the sweep picks among c0 and c2
    (``sweep_min_candidates`` 1, the default), the run releases and succeeds, the failed candidate is a failed mapped
    task instance, recorded in the lineage with its reason and named in the run note."""
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.lineage import lineage_errors

    proc, summary = sweeps["c1_fails"]()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert summary["state"] == "success"
    tasks = states(summary)
    assert tasks[ids.SWEEP_PICK_BEST] == "success" and tasks[ids.RUN_OUTCOME] == "success"
    assert tasks["deploy.deploy_to_robots"] == "success"  # the release went on with the survivor
    mapped = summary["mapped_tasks"]
    assert mapped[ids.SWEEP_TRAIN_POLICY] == ["success", "failed", "success"], mapped
    assert mapped[ids.SWEEP_READ_EVAL_REPORT] == ["success", "upstream_failed", "success"], mapped
    lineage = summary["lineage"]
    assert lineage_errors(lineage) == []
    c0, c1, c2 = lineage["candidates"]
    assert (c0["state"], c2["state"]) == ("success", "success") and c0["reason"] is None
    assert c1["state"] == "failed" and c1["success_rate"] is None and not c1["won"]
    assert "sweep.train_policy is failed" in c1["reason"] and "FAILED" in c1["reason"]
    assert c1["batch_job_id"]  # its job is named: the reason is its DescribeJobs statusReason
    sweep = lineage["sweep"]
    assert sweep["failed"] == [1] and sweep["survivors"] == 2 and sweep["min_candidates"] == 1
    winner = lineage["candidates"][sweep["winner"]]
    assert sweep["winner"] in (0, 2) and lineage["chain"]["checkpoint_sha256"] == winner["checkpoint_sha256"]
    assert "1 of 3 candidates failed (c1: sweep.train_policy is failed" in summary["run_note"]
    assert not [n for n in summary["notifications"] if n["event"] == "run_failed"]


def test_a_sweep_that_needs_every_candidate_fails_at_its_pick_naming_the_failed_one(sweeps):
    """sweep_min_candidates 3 of 3 (every candidate needed) and candidate c1's job fails: pick_best fails with the
    reason (2 of 3 succeeded), the run fails, and the lineage records c1's state and reason."""
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.lineage import lineage_errors

    proc, summary = sweeps["c1_fails_all_needed"]()
    assert proc.returncode == 1, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert summary["state"] == "failed"
    tasks = states(summary)
    assert tasks[ids.SWEEP_PICK_BEST] == "failed" and tasks[ids.RUN_OUTCOME] == "failed"
    assert tasks[ids.QUALITY_GATE] == "upstream_failed"
    assert "only 2 of 3 sweep candidates succeeded, sweep_min_candidates is 3: c1 failed: sweep.train_policy is " \
           "failed" in proc.stdout + proc.stderr
    lineage = summary["lineage"]
    assert lineage_errors(lineage) == [] and lineage["sweep"] is None
    assert [c["state"] for c in lineage["candidates"]] == [None, "failed", None]
    assert lineage["candidates"][1]["reason"].startswith("sweep.train_policy is failed")
