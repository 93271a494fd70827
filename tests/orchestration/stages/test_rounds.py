"""Retraining rounds: the form's fields, the round plan (resume iteration, fresh seeds, the best checkpoint so far),
the budget over every round, the checkpoint copy a round resumes from, and the rounds' report."""

from __future__ import annotations

import hashlib

import boto3
import pytest
from moto import mock_aws

from sim2real.contract.stats import wilson_interval
from sim2real.orchestration.budget import BudgetExceeded, estimate_run_cost, training_cost_limit
from sim2real.orchestration.params import ParamRuleError, build_params, check_params
from sim2real.orchestration.stages import plan_run, quality_gate
from sim2real.orchestration.stages.rounds import (RETRAIN_FIELD, best_round, lineage_entry, next_round_conf,
                                                  round_result, seed_checkpoint)

from tests.orchestration.test_config import GOOD
from .test_stages import PARAMS

SHA = "a" * 64
PARENT_CKPT = "s3://b/runs/parent-key/checkpoints/agent_000040.pt"


def _entry(round_, successes, episodes=20, sha=SHA, uri=PARENT_CKPT, iteration=40):
    lo, hi = wilson_interval(successes, episodes)
    return {"round": round_, "run_id": f"manual__r{round_}", "run_key": f"key-{round_}", "success_rate": successes / episodes,
            "ci95": [lo, hi], "successes": successes, "episodes": episodes, "first_seed": 1000 + 20 * (round_ - 1),
            "checkpoint_uri": uri, "checkpoint_sha256": sha, "iteration": iteration, "passed": False}


def _link(round_=2, **over):
    link = {"round": round_, "parent_run_id": "manual__r1", "parent_run_key": "key-1",
            "resume_from": {"checkpoint_uri": PARENT_CKPT, "sha256": SHA, "iteration": 40, "round": 1},
            "history": [_entry(r, 3) for r in range(1, round_)]}
    return {**link, **over}


def _plan(env=GOOD, **params):
    return plan_run(dag_id="sim_to_real", run_id="manual__2026-12-02T00:00:00+00:00", params={**PARAMS, **params},
                    env=env)


S3_ENV = {**GOOD, "artifacts_bucket": "bkt"}  # a bucket name S3 accepts
S3_PARENT_CKPT = "s3://bkt/runs/parent-key/checkpoints/agent_000040.pt"


def test_one_round_plans_the_run_as_without_rounds():
    plan = _plan()
    assert plan["rounds"] == {"round": 1, "max_rounds": 1, "round_iterations": 1000, "max_iterations": 40,
                              "eval_seed": 1000, "parent_run_id": None, "parent_run_key": None, "resume_from": None,
                              "resumed_checkpoint_uri": None, "history": []}
    assert plan["batch"]["environment"]["MAX_ITERATIONS"] == "40" and plan["evaluation"]["seed"] == 1000
    train = plan["budget"]["items"][0]
    assert train["hours"] == round(60 / 3600, 4) and train["basis"] == "train_time_budget_seconds 60"


def test_the_form_refuses_rounds_out_of_range_and_a_link_that_is_no_object():
    specs = build_params()
    assert specs["max_rounds"].resolve(3) == 3 and specs[RETRAIN_FIELD].resolve(None) is None
    for field, value in (("max_rounds", 0), ("max_rounds", 11), ("round_iterations", 0), (RETRAIN_FIELD, "round 2")):
        with pytest.raises(Exception, match="ParamValidationError|less than the minimum|greater than the maximum|"
                                            "is not of type"):
            specs[field].resolve(value)


def test_a_later_round_resumes_from_the_link_with_more_iterations_and_fresh_seeds():
    plan = _plan(max_rounds=3, round_iterations=25, **{RETRAIN_FIELD: _link()})
    key = plan["run_key"]
    rounds = plan["rounds"]
    assert (rounds["round"], rounds["parent_run_id"], rounds["parent_run_key"]) == (2, "manual__r1", "key-1")
    assert rounds["resumed_checkpoint_uri"] == f"s3://b/runs/{key}/checkpoints/agent_000040.pt"
    # The trainer counts iterations across resumes: resumed 40 + 25 more.
    assert plan["batch"]["environment"]["MAX_ITERATIONS"] == "65" == plan["hyperpod"]["environment"]["MAX_ITERATIONS"]
    # Round 2's episodes follow round 1's: seeds 1020..1039 (eval_seed 1000, 20 episodes).
    assert plan["evaluation"]["seed"] == rounds["eval_seed"] == 1020
    # The copy has no manifest: the job's environment names it and its iteration (the Isaac Lab launcher
    # then trains 65 - 40 = 25 iterations, not 65), on both backends.
    for backend in ("batch", "hyperpod"):
        env = plan[backend]["environment"]
        assert env["SIM2REAL_RESUMED_CHECKPOINT_URI"] == rounds["resumed_checkpoint_uri"]
        assert env["SIM2REAL_RESUMED_ITERATION"] == "40"
    assert not {k for k in _plan()["batch"]["environment"] if k.startswith("SIM2REAL_RESUMED_")}  # round 1


@pytest.mark.parametrize("link, reason", [
    (_link(round_=1), "round must be an integer from 2 to max_rounds"),
    (_link(round_=4), "round must be an integer from 2 to max_rounds \\(3\\)"),
    (_link(history=[]), "history must hold rounds 1 to 1"),
    (_link(parent_run_id=""), "parent_run_id must name the previous round's run"),
    (_link(resume_from={"checkpoint_uri": "s3://b/x/model.bin", "sha256": SHA, "iteration": 1}),
     "must be an s3://…/agent_<n>.pt checkpoint"),
    (_link(resume_from={"checkpoint_uri": PARENT_CKPT, "sha256": "XYZ", "iteration": 1}), "64 lowercase hex"),
    (_link(resume_from={"checkpoint_uri": PARENT_CKPT, "sha256": SHA, "iteration": -1}), "non-negative integer"),
])
def test_a_link_no_previous_round_wrote_is_refused_with_the_reason(link, reason):
    with pytest.raises(ParamRuleError, match=reason):
        check_params({**PARAMS, "max_rounds": 3, RETRAIN_FIELD: link}, GOOD)


def test_an_empty_link_is_a_new_run():
    check_params({**PARAMS, "max_rounds": 3, RETRAIN_FIELD: {}}, GOOD)  # the form's empty object field
    assert _plan(max_rounds=3, **{RETRAIN_FIELD: {}})["rounds"]["round"] == 1


def test_seeds_of_the_last_round_must_fit_the_seed_range():
    with pytest.raises(ParamRuleError, match="is above 2\\*\\*31 - 1"):
        check_params({**PARAMS, "max_rounds": 3, "eval_seed": 2**31 - 50}, GOOD)
    check_params({**PARAMS, "max_rounds": 2, "eval_seed": 2**31 - 40}, GOOD)  # 2 x 20 seeds fit exactly


def test_seeds_of_a_sweeps_candidates_must_fit_the_seed_range():
    # the candidates are evaluated on the 20 episodes after the gate's: seeds eval_seed + 20 .. eval_seed + 39
    sweep = [{"seed": 3}, {"seed": 4}]
    with pytest.raises(ParamRuleError, match="eval_seed \\+ 2 x eval_episodes - 1 = 2147483648 is above 2\\*\\*31 - 1"):
        check_params({**PARAMS, "sweep": sweep, "eval_seed": 2**31 - 39}, GOOD)
    check_params({**PARAMS, "sweep": sweep, "eval_seed": 2**31 - 40}, GOOD)  # 2 x 20 seeds fit exactly
    check_params({**PARAMS, "eval_seed": 2**31 - 20}, GOOD)  # no sweep: only the gate's 20 seeds


def test_every_round_counts_against_the_budget_up_front():
    one = estimate_run_cost({**PARAMS, "run_vla_finetune": False, "train_time_budget_seconds": 3600}, GOOD)
    three = estimate_run_cost({**PARAMS, "run_vla_finetune": False, "train_time_budget_seconds": 3600,
                               "max_rounds": 3}, GOOD)
    assert three["items"][0]["usd"] == pytest.approx(3 * one["items"][0]["usd"], abs=0.01)
    assert three["items"][0]["basis"] == "train_time_budget_seconds 3600 per round x max_rounds 3"
    with pytest.raises(BudgetExceeded, match=r"estimated cost \$13\.80 is above max_budget_usd \$10\.00: training: 1 x "
                       r"g6\.12xlarge x 3 h .* per round x max_rounds 3.*max_rounds"):
        _plan(run_vla_finetune=False, deploy_to_edge=False, train_time_budget_seconds=3600, max_rounds=3,
              max_budget_usd=10.0)
    # Each round's job may spend its share of what the other stages leave.
    assert training_cost_limit({**three, "max_budget_usd": 30.0}) == 10.0


def _report(successes, episodes=20, sha=SHA):
    lo, hi = wilson_interval(successes, episodes)
    return {"successes": successes, "episodes": episodes, "success_rate": successes / episodes, "ci95": [lo, hi],
            "checkpoint_sha256": sha}


def _verdict(plan, report):
    return quality_gate(report, min_success_rate=plan["quality_gate"]["min_success_rate"],
                        on_lower_bound=plan["quality_gate"]["on_lower_bound"])


def test_a_failed_round_hands_the_next_one_its_checkpoint_and_the_history():
    plan = _plan(max_rounds=3)
    manifest = {"checkpoint_uri": f"{plan['run_uri']}checkpoints/agent_000040.pt", "sha256": "b" * 64, "iteration": 40}
    report = _report(4)
    result = round_result(plan, "manual__r1", report, manifest, _verdict(plan, report))
    assert (result["passed"], result["first_seed"], result["iteration"]) == (False, 1000, 40)
    conf = next_round_conf(plan, result, run_id="manual__r1")
    assert {k: v for k, v in conf.items() if k != RETRAIN_FIELD} == {k: v for k, v in plan["params"].items()
                                                                      if k != RETRAIN_FIELD}
    link = conf[RETRAIN_FIELD]
    assert link["round"] == 2 and link["parent_run_key"] == plan["run_key"] and link["history"] == [result]
    assert link["resume_from"] == {"checkpoint_uri": manifest["checkpoint_uri"], "sha256": "b" * 64, "iteration": 40,
                                   "round": 1}
    check_params({**conf}, GOOD)  # what round 1 hands on is a valid run conf for round 2
    passed = round_result(plan, "manual__r1", _report(18), manifest, _verdict(plan, _report(18)))
    assert next_round_conf(plan, passed, run_id="manual__r1") is None  # the gate passed: no next round
    last = _plan(max_rounds=2, **{RETRAIN_FIELD: _link()})
    assert next_round_conf(last, {**result, "round": 2}, run_id="manual__r2") is None  # the last round


def test_the_next_round_resumes_from_the_best_round_so_far_not_the_last():
    good, worse = _entry(1, 9, sha="1" * 64), _entry(2, 4, sha="2" * 64)
    assert best_round([good, worse]) is good
    assert best_round([good, _entry(2, 9, sha="3" * 64)])["round"] == 2  # a tie: the later, longer-trained one
    plan = _plan(max_rounds=3, **{RETRAIN_FIELD: _link(history=[good])})
    conf = next_round_conf(plan, worse, run_id="manual__r2")
    assert conf[RETRAIN_FIELD]["resume_from"]["sha256"] == "1" * 64 and conf[RETRAIN_FIELD]["resume_from"]["round"] == 1
    with pytest.raises(ValueError, match="no round"):
        best_round([])


@pytest.fixture
def s3(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        yield client


def _put_checkpoint(s3, body: bytes, sidecar: str | None = None):
    sha = hashlib.sha256(body).hexdigest()
    s3.put_object(Bucket="bkt", Key="runs/parent-key/checkpoints/agent_000040.pt", Body=body)
    s3.put_object(Bucket="bkt", Key="runs/parent-key/checkpoints/agent_000040.pt.sha256",
                  Body=(sidecar or sha).encode())
    return sha


def test_a_round_copies_the_checkpoint_it_resumes_from_into_its_own_folder(s3):
    sha = _put_checkpoint(s3, b"policy bytes")
    plan = _plan(S3_ENV, max_rounds=2, **{RETRAIN_FIELD: _link(resume_from={
        "checkpoint_uri": S3_PARENT_CKPT, "sha256": sha, "iteration": 40, "round": 1})})
    seeded = seed_checkpoint(plan, conn_id=None)
    key = f"runs/{plan['run_key']}/checkpoints/agent_000040.pt"
    assert seeded == {"source": S3_PARENT_CKPT, "copied_to": f"s3://bkt/{key}", "sha256": sha, "iteration": 40}
    assert s3.get_object(Bucket="bkt", Key=key)["Body"].read() == b"policy bytes"
    assert s3.get_object(Bucket="bkt", Key=f"{key}.sha256")["Body"].read().decode() == sha  # the trainer's "complete"
    assert seed_checkpoint(_plan(S3_ENV), conn_id=None) is None  # round 1: nothing to copy


def test_a_checkpoint_that_changed_or_went_is_refused(s3):
    _put_checkpoint(s3, b"other bytes")
    plan = _plan(S3_ENV, max_rounds=2, **{RETRAIN_FIELD: _link(resume_from={  # the link records sha256 "aaaa…"
        "checkpoint_uri": S3_PARENT_CKPT, "sha256": SHA, "iteration": 40, "round": 1})})
    with pytest.raises(ValueError, match="hashes to .* the previous round recorded a{64}"):
        seed_checkpoint(plan, conn_id=None)
    s3.delete_object(Bucket="bkt", Key="runs/parent-key/checkpoints/agent_000040.pt")
    with pytest.raises(ValueError, match="no longer exists .* manual__r1"):
        seed_checkpoint(plan, conn_id=None)


def test_the_rounds_report_lists_every_rounds_success_rate_and_matches_the_schema():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors, render_markdown
    from sim2real.orchestration.plots import round_success_figure, round_success_png
    from sim2real.orchestration.run_note import render_run_note

    plan = _plan(max_rounds=3, **{RETRAIN_FIELD: _link()})
    manifest = {"checkpoint_uri": f"{plan['run_uri']}checkpoints/agent_000065.pt", "sha256": "c" * 64, "iteration": 65}
    entry = lineage_entry(plan, run_id="manual__r2", evaluation=_report(6), checkpoint=manifest,
                          next_run_id="manual__r3")
    assert entry["outcome"] == "retraining" and [r["round"] for r in entry["rounds"]] == [1, 2]
    assert entry["rounds"][1]["first_seed"] == 1020 and entry["rounds"][1]["checkpoint_sha256"] == "c" * 64
    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="manual__r2", params=plan["params"],
                            plan=plan, rounds=entry)
    assert lineage_errors(lineage) == []
    assert "| 2 | `manual__r2` | 0.300 |" in render_markdown(lineage)
    note = render_run_note(lineage)
    assert "**Round 2 of 3**" in note and "0.150 [" in note and "round 3 is run `manual__r3`" in note
    assert lineage_entry(plan, run_id="r", evaluation=None, checkpoint=None, next_run_id=None)["outcome"] == "not_evaluated"
    assert render_run_note(build_lineage(run_key="k", dag_id="d", run_id="r", params={}, plan=_plan(),
                                         rounds=lineage_entry(_plan(), run_id="r", evaluation=None, checkpoint=None,
                                                              next_run_id=None))).count("Round") == 0
    fig = round_success_figure(entry, run_key=plan["run_key"], threshold=0.5)
    assert fig.axes[0].get_xlim() == (0.5, 3.5)  # every round up to max_rounds
    assert round_success_png(entry, run_key="k", threshold=0.5).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="no evaluated round"):
        round_success_figure({**entry, "rounds": []}, run_key="k", threshold=0.5)


def test_a_sweep_with_retraining_rounds_is_refused_with_the_reason():
    sweep = [{"seed": 3}, {"seed": 4}]
    with pytest.raises(ParamRuleError, match="max_rounds 2 with a sweep"):
        check_params({**PARAMS, "max_rounds": 2, "sweep": sweep}, GOOD)
    check_params({**PARAMS, "max_rounds": 1, "sweep": sweep}, GOOD)
    check_params({**PARAMS, "max_rounds": 2, "sweep": None}, GOOD)
