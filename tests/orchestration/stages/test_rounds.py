"""Retraining rounds: the form's fields, the round plan (resume iteration, fresh seeds, the best checkpoint so far),
the budget over every round, the checkpoint copy a round resumes from, and the rounds' report."""

from __future__ import annotations

import hashlib

import boto3
import pytest
from moto import mock_aws

from sim2real.contract.stats import wilson_interval
from sim2real.orchestration.budget import BudgetExceeded, estimate_run_cost, training_cost_limit
from sim2real.orchestration.params import RETRAIN_FIELD, ParamRuleError
from sim2real.orchestration.stages.run import build_params, check_params, plan_run
from sim2real.orchestration.stages import quality_gate
from sim2real.orchestration.stages.rounds import (best_round, lineage_entry, next_round_conf,
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
                              "resumed_checkpoint_uri": None, "history": [], "sweep": None}
    assert plan["batch"]["environment"]["MAX_ITERATIONS"] == "40" and plan["evaluation"]["seed"] == 1000
    train = plan["budget"]["items"][0]
    assert train["hours"] == round(60 / 3600, 4) and train["basis"] == "train_time_budget_seconds 60"


def test_the_form_refuses_rounds_out_of_range_and_a_link_that_is_no_object():
    specs = build_params()
    assert specs["max_rounds"].resolve(3) == 3
    for field, value in (("max_rounds", 0), ("max_rounds", 11), ("round_iterations", 0)):
        with pytest.raises(Exception, match="ParamValidationError|less than the minimum|greater than the maximum|"
                                            "is not of type"):
            specs[field].resolve(value)
    with pytest.raises(ParamRuleError, match="retrain_round .* must be an object"):
        check_params({**PARAMS, "max_rounds": 3, RETRAIN_FIELD: "round 2"}, GOOD)


def test_the_round_link_is_no_field_of_the_form_but_a_run_conf_key_the_dag_accepts():
    from sim2real.orchestration.params import check_conf_keys

    specs = build_params()
    assert RETRAIN_FIELD not in specs  # set by the previous round's run only: nothing for a person to fill in
    check_conf_keys({"max_rounds": 2, RETRAIN_FIELD: _link()}, specs)
    with pytest.raises(ParamRuleError, match="retrain_rounds"):
        check_conf_keys({"retrain_rounds": 1}, specs)


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
    # the candidates are evaluated on the 20 episodes after every round's gate episodes: with one round, seeds
    # eval_seed + 20 .. eval_seed + 39; with 3 rounds, eval_seed + 60 .. eval_seed + 79
    sweep = [{"seed": 3}, {"seed": 4}]
    with pytest.raises(ParamRuleError, match=r"eval_seed \+ \(max_rounds \+ 1\) x eval_episodes - 1 = 2147483648 is "
                                             r"above 2\*\*31 - 1"):
        check_params({**PARAMS, "sweep": sweep, "eval_seed": 2**31 - 39}, GOOD)
    check_params({**PARAMS, "sweep": sweep, "eval_seed": 2**31 - 40}, GOOD)  # 2 x 20 seeds fit exactly
    check_params({**PARAMS, "eval_seed": 2**31 - 20}, GOOD)  # no sweep: only the gate's 20 seeds
    with pytest.raises(ParamRuleError, match=r"= 2147483648 is above"):
        check_params({**PARAMS, "sweep": sweep, "max_rounds": 3, "eval_seed": 2**31 - 79}, GOOD)
    check_params({**PARAMS, "sweep": sweep, "max_rounds": 3, "eval_seed": 2**31 - 80}, GOOD)


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


SWEEP = [{"seed": 3}, {"seed": 4, "num_envs": 64}, {"seed": 5, "train_time_budget_seconds": 30}]


def _picked(plan, winner=1, failed=()):
    """A pick_best result of ``plan``'s sweep: ``winner`` won, ``failed`` candidates failed."""
    rows = [{"index": c["index"], "candidate": c["candidate"], "overrides": c["overrides"], "params": c["params"],
             "reason": "sweep.train_policy is failed" if c["index"] in failed else None, "won": c["index"] == winner}
            for c in plan["sweep"]["candidates"]]
    return {"winner": winner, "candidate": f"c{winner}", "candidates": rows, "failed": list(failed)}


def test_a_sweep_with_retraining_rounds_is_planned_and_its_candidates_see_no_rounds_episodes():
    check_params({**PARAMS, "max_rounds": 3, "sweep": SWEEP}, GOOD)  # no longer refused
    plan = _plan(max_rounds=3, sweep=SWEEP)
    assert plan["sweep"]["enabled"] and plan["rounds"]["max_rounds"] == 3
    # rounds' gate episodes: 1000.., 1020.., 1040..; the candidates' selection after all of them
    assert plan["sweep"]["selection_eval_seed"] == 1000 + 3 * 20
    assert all(c["eval_seed"] == 1060 for c in plan["sweep"]["candidates"])
    assert _plan(sweep=SWEEP)["sweep"]["selection_eval_seed"] == 1020  # one round: as before


def test_the_round_after_a_sweep_continues_the_winner_without_the_sweep():
    plan = _plan(max_rounds=3, sweep=SWEEP)
    report = {"success_rate": 0.1, "ci95": list(wilson_interval(2, 20)), "successes": 2, "episodes": 20}
    manifest = {"checkpoint_uri": f"{plan['sweep']['candidates'][1]['output_uri']}agent_000040.pt", "sha256": SHA,
                "iteration": 40}
    verdict = quality_gate(report, min_success_rate=0.8, on_lower_bound=True)
    this = round_result(plan, "manual__r1", report, manifest, verdict)
    conf = next_round_conf(plan, this, run_id="manual__r1", sweep=_picked(plan, winner=1, failed=[2]))
    # the winner's params over the run's, the sweep cleared: a later round retrains one policy
    assert conf["sweep"] is None and conf["seed"] == 4 and conf["num_envs"] == 64
    link = conf[RETRAIN_FIELD]
    assert link["resume_from"]["checkpoint_uri"] == manifest["checkpoint_uri"] and link["round"] == 2
    assert link["sweep"] == {"field": SWEEP, "base": {"seed": 0, "num_envs": 8, "max_iterations": 40,
                                                      "train_time_budget_seconds": 60},
                             "winner": "c1", "overrides": {"seed": 4, "num_envs": 64}, "run_id": "manual__r1",
                             "candidates": 3, "failed": 1}
    check_params(conf, GOOD)  # the conf round 1 writes is one the form takes
    two = _plan(**conf)
    assert two["sweep"]["enabled"] is False and two["rounds"]["sweep"]["winner"] == "c1"
    assert two["batch"]["environment"]["SEED"] == "4" and two["batch"]["environment"]["NUM_ENVS"] == "64"
    # round 2's lineage says whose params it retrains; round 3's link keeps round 1's sweep
    entry = lineage_entry(two, run_id="manual__r2", evaluation=None, checkpoint=None, next_run_id=None)
    assert entry["sweep"] == {"run_id": "manual__r1", "winner": "c1", "overrides": {"seed": 4, "num_envs": 64},
                              "candidates": 3, "failed": 1}
    this2 = round_result(two, "manual__r2", report, {**manifest, "iteration": 1040}, verdict)
    three = next_round_conf(two, this2, run_id="manual__r2")
    assert three[RETRAIN_FIELD]["sweep"] == link["sweep"] and three["seed"] == 4 and three["sweep"] is None
    # a link that carries a sweep refuses a run that sweeps again, and a malformed one
    with pytest.raises(ParamRuleError, match="retrains its winner only: clear sweep"):
        check_params({**conf, "sweep": SWEEP}, GOOD)
    with pytest.raises(ParamRuleError, match="sweep must be round 1's sweep"):
        check_params({**conf, RETRAIN_FIELD: {**link, "sweep": {"winner": "c1"}}}, GOOD)


def test_a_sweep_loops_budget_counts_round_1s_candidates_and_the_later_rounds_and_is_the_same_every_round():
    from sim2real.orchestration.budget import candidate_cost_limits

    hour = {"run_vla_finetune": False, "deploy_to_edge": False, "train_time_budget_seconds": 3600,
            "training_timeout_hours": 2.0}
    sweep = [{"seed": 3}, {"seed": 4, "num_envs": 64}, {"seed": 5, "train_time_budget_seconds": 1800}]
    est = estimate_run_cost({**PARAMS, **hour, "max_rounds": 3, "sweep": sweep}, GOOD)
    training = [i for i in est["items"] if i["stage"] == "training"]
    single = estimate_run_cost({**PARAMS, **hour}, GOOD)["items"][0]["usd"]  # one hour, one round
    # round 1: one item per candidate (c2 trains 30 min), then rounds 2-3 sized for the longest candidate (1 h)
    assert [i.get("candidate") for i in training] == ["c0", "c1", "c2", None]
    assert [i["rounds"] for i in training] == [1, 1, 1, 2]
    assert [i["usd"] for i in training] == pytest.approx([single, single, single / 2, 2 * single], abs=0.01)
    assert training[-1]["basis"].startswith("rounds 2-3: the sweep winner's training")
    assert est["total_usd"] == pytest.approx(4.5 * single, abs=0.03)
    # refused up front when the loop is over max_budget_usd, though round 1 alone fits
    with pytest.raises(BudgetExceeded, match=r"above max_budget_usd .*rounds 2-3"):
        _plan(max_rounds=3, sweep=sweep, **hour, max_budget_usd=round(3 * single, 2))
    # round 2 rebuilds the same figure from round 1's sweep in its link: a loop that fits is never refused later
    limit = round(5 * single, 2)
    plan = _plan(max_rounds=3, sweep=sweep, **hour, max_budget_usd=limit)
    report = {"success_rate": 0.1, "ci95": list(wilson_interval(2, 20)), "successes": 2, "episodes": 20}
    manifest = {"checkpoint_uri": "s3://b/runs/k/candidates/c1/checkpoints/agent_000040.pt", "sha256": SHA,
                "iteration": 40}
    this = round_result(plan, "r1", report, manifest, quality_gate(report, min_success_rate=0.8, on_lower_bound=True))
    two = _plan(**next_round_conf(plan, this, run_id="r1", sweep=_picked(plan, winner=2)))
    assert two["params"]["train_time_budget_seconds"] == 1800  # the winner c2's own time budget
    assert two["budget"]["total_usd"] == plan["budget"]["total_usd"]
    assert [i.get("candidate") for i in two["budget"]["items"]] == ["c0", "c1", "c2", None]
    # the training allowance (max_budget_usd, no other stage) is shared in proportion: each candidate its share in
    # round 1, each later round half of the later rounds' share
    limits = candidate_cost_limits(plan["budget"], 3)
    assert limits == pytest.approx([limit / 4.5, limit / 4.5, limit / 9], abs=0.01)
    assert [c["cost_limit_usd"] for c in plan["sweep"]["candidates"]] == limits
    assert training_cost_limit(two["budget"]) == pytest.approx(limit / 4.5, abs=0.01)
    assert two["batch"]["cost_limit_usd"] == training_cost_limit(two["budget"])
    assert sum(limits) + 2 * training_cost_limit(two["budget"]) == pytest.approx(limit, abs=0.03)


def test_a_later_rounds_actual_cost_adds_every_earlier_rounds_from_their_lineage(s3):
    """Round 3: its own cost plus rounds 1 and 2 as their lineage.json recorded them (S3 GetObject per round); a
    round whose lineage is gone makes the figure a lower bound, with the reason, and the note shows it beside the
    loop's estimate."""
    import json

    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from sim2real.orchestration.cost_actual import loop_cost
    from sim2real.orchestration.lineage import build_lineage, lineage_errors, render_markdown
    from sim2real.orchestration.report import with_loop_cost
    from sim2real.orchestration.run_note import render_run_note

    hook = S3Hook(aws_conn_id=None)
    history = [_entry(1, 3), _entry(2, 4)]
    plan = _plan(env=S3_ENV, max_rounds=3, retrain_round=_link(3, history=history))
    actual = {"currency": "USD", "price_source": "p", "total_usd": 1.25, "max_budget_usd": 500.0, "unknown": [],
              "within_budget": True, "items": []}
    hook.load_string(json.dumps({"cost_actual": {**actual, "total_usd": 2.5}}), key="runs/key-1/lineage.json",
                     bucket_name="bkt")
    hook.load_string(json.dumps({"cost_actual": {**actual, "total_usd": 0.75, "unknown": ["vla_finetune"]}}),
                     key="runs/key-2/lineage.json", bucket_name="bkt")
    out = with_loop_cost(plan, actual, "manual__r3", hook)
    loop = out["loop"]
    assert loop["total_usd"] == 4.5 and loop["unknown_rounds"] == [2]  # round 2's own figure is a lower bound
    assert [(r["round"], r["run_key"], r["total_usd"]) for r in loop["rounds"]] == [
        (1, "key-1", 2.5), (2, "key-2", 0.75), (3, plan["run_key"], 1.25)]
    assert out["total_usd"] == 1.25  # this run's own figure is unchanged

    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="manual__r3", params=plan["params"],
                            plan=plan, cost_actual=out)
    assert lineage_errors(lineage) == []
    note = render_run_note(lineage)
    assert (f"; loop so far (rounds 1-3) at least $4.50 of the loop's estimate ${plan['budget']['total_usd']:.2f} "
            "(round 2 unknown)") in note
    assert "the loop so far (rounds 1, 2, 3): at least $4.50" in render_markdown(lineage)

    # round 1's lineage is gone: the loop's figure is a lower bound that says why
    hook.get_conn().delete_object(Bucket="bkt", Key="runs/key-1/lineage.json")
    gone = with_loop_cost(plan, actual, "manual__r3", hook)["loop"]
    assert gone["total_usd"] == 2.0 and gone["unknown_rounds"] == [1, 2]
    assert gone["rounds"][0]["total_usd"] is None and "runs/key-1/lineage.json not readable" in gone["rounds"][0]["reason"]
    # round 1, and a run without rounds: no loop figure
    assert "loop" not in with_loop_cost(_plan(env=S3_ENV, max_rounds=3), actual, "r1", hook)
    assert with_loop_cost(plan, None, "r3", hook) is None
    assert loop_cost(actual, round_=2, run_id="r2", run_key="k2", earlier=[])["total_usd"] == 1.25


def test_the_next_rounds_run_is_created_with_a_note_that_names_its_round_and_parent():
    """The round's run is recognisable on its page from the start: the trigger gives it a note (Airflow's
    TriggerDagRunOperator ``note``, rendered from plan_next_round's XCom), which its report later replaces."""
    from airflow.providers.common.compat.sdk import DagRunTriggerException

    from sim2real.orchestration.stages.rounds import NextRoundOperator, round_note

    note = round_note(_link(), max_rounds=3)
    assert note.startswith("**Retraining round 2 of 3**, parent run `manual__r1`"), note
    assert "round 1's checkpoint (iteration 40)" in note
    op = NextRoundOperator(task_id="next_round", trigger_dag_id="sim_to_real", conf={"max_rounds": 3},
                           note="{{ ti.xcom_pull(task_ids='plan_next_round', key='run_note') }}")
    assert "note" in op.template_fields
    op.note = note  # what Airflow renders from the XCom
    with pytest.raises(DagRunTriggerException) as trigger:
        op.execute({})
    assert trigger.value.note == note and trigger.value.trigger_dag_id == "sim_to_real"
