"""sim2real-evaluate: determinism, sha256 mismatch → exit 3 without a report, Wilson interval, S3 report."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from sim2real.contract import schemas
from sim2real.workloads.evaluate import main, wilson_interval
from tests.workloads.conftest import clean_env, run_evaluate


def evaluate(*args: str, **env: str) -> subprocess.CompletedProcess:
    return run_evaluate(clean_env(**env), *args)


def test_same_checkpoint_and_seeds_give_identical_reports(trained_dir, tmp_path, capsys):
    """Once as ``python -m`` in a process of its own, once through ``main`` here (after the process already ran
    torch and MuJoCo: the seeds, not a fresh process's state, make the report)."""
    args = ("--manifest-uri", str(trained_dir / "manifest.json"), "--episodes", "3", "--seed", "7")
    proc = evaluate(*args, "--report-uri", str(tmp_path / "r1.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    reports = [json.loads((tmp_path / "r1.json").read_text())]
    assert json.loads(proc.stdout) == reports[-1]  # the report is printed too
    capsys.readouterr()
    assert main([*args, "--report-uri", str(tmp_path / "r2.json")]) == 0
    reports.append(json.loads((tmp_path / "r2.json").read_text()))
    assert json.loads(capsys.readouterr().out) == reports[-1]
    a, b = ({k: v for k, v in r.items() if k != "created_at"} for r in reports)
    assert a == b
    r = reports[0]
    assert r["seeds"] == [7, 8, 9] and r["episodes"] == 3 and r["episode_lengths"] == [50, 50, 50]
    assert r["ci_method"] == "wilson" and r["successes"] == sum(r["successes_per_episode"])
    assert r["success_rate"] == r["successes"] / 3
    assert list(wilson_interval(r["successes"], 3)) == r["ci95"]
    assert r["checkpoint_uri"] == str(trained_dir / "agent_000002.pt")
    assert "0.05 m" in r["success_definition"]
    assert r["mean_return"] == pytest.approx(sum(r["returns"]) / 3)
    assert schemas.errors("eval_report", r) == []
    # the manifest the evaluator read, as the trainer wrote it
    assert schemas.errors("checkpoint_manifest", json.loads((trained_dir / "manifest.json").read_text())) == []


def test_sha256_mismatch_exits_3_and_writes_no_report(trained_dir, tmp_path, capsys):
    tampered = tmp_path / "agent_000002.pt"
    shutil.copy(trained_dir / "agent_000002.pt", tampered)
    with open(tampered, "ab") as fh:
        fh.write(b"\0")
    report = tmp_path / "report.json"
    assert main(["--manifest-uri", str(trained_dir / "manifest.json"), "--checkpoint-uri", str(tampered),
                 "--episodes", "2", "--report-uri", str(report)]) == 3  # the console script's exit status
    stderr = capsys.readouterr().err
    assert "sha256 mismatch" in stderr and str(tampered) in stderr
    assert not report.exists()


def test_missing_manifest_is_bad_input(tmp_path, capsys):
    assert main(["--manifest-uri", str(tmp_path / "nope.json"), "--report-uri", str(tmp_path / "r.json")]) == 2
    assert "nope.json" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_report_to_s3(trained_dir, moto_server, monkeypatch):
    proc = evaluate("--manifest-uri", str(trained_dir / "manifest.json"), "--episodes", "1",
                    "--report-uri", "s3://sim2real-test/runs/k/eval/report.json", AWS_ENDPOINT_URL=moto_server)
    assert proc.returncode == 0, proc.stderr[-2000:]
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    from sim2real.contract import storage

    assert json.loads(storage.read_bytes("s3://sim2real-test/runs/k/eval/report.json"))["episodes"] == 1


@pytest.mark.parametrize("k,n,low,high", [
    # Newcombe (1998), Stat Med 17:857, Table I (Wilson score, no continuity correction)
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_interval_known_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_wilson_interval_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and 0.69 < lo < 0.73
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
