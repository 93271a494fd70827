"""End to end: retraining rounds on the real sim_to_real DAG (dag.test) against the local sandbox.

A gate failure with rounds left triggers the next round as a new run (``next_round``); the demo runs each
queued round as the scheduler would. Deterministic at toy size: round 1 trains a single PPO iteration (its
deterministic policy reaches no target in 20 episodes: 0/20), round 2 resumes from it and trains to iteration 30
(about 0.45 on Reacher-v5), with the gate at a point estimate of 0.25 between the two; the all-fail cases gate
on a 95% lower bound of 0.83, which only 20/20 episodes reach (0.839): far above what 1-2 PPO iterations score
(an unreachable bar, such as 0.99 with 20 episodes, is refused before the run starts). Each of the file's two
loops starts when its test asks for it (the ``loops`` fixture), in its own process, sandbox and Airflow home; the
all-fail loop (a sweep in round 1, one retrained policy in round 2) serves two tests: the loop's end when every round
fails, and the sweep's link to round 2.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_sandbox_run import start_demos, states

#: Each run starts when its test asks for it (``start_demos``), one after another.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

BUCKET = "sim2real-artifacts-123456789012"
#: The file's two loops (each its own process, sandbox and Airflow home), each started when its test asks for it.
PASSES_IN_ROUND_2 = ('{"max_rounds": 3, "max_iterations": 1, "round_iterations": 29, "train_time_budget_seconds": 300, '
                     '"eval_episodes": 20, "min_success_rate": 0.25, "gate_on_lower_bound": false}')
EVERY_ROUND_FAILS = ('{"max_rounds": 2, "max_iterations": 1, "round_iterations": 1, "train_time_budget_seconds": 60, '
                     '"eval_episodes": 20, "min_success_rate": 0.83, "gate_on_lower_bound": true, '
                     '"run_vla_finetune": false, "deploy_to_edge": false}')
SEEDS = ("--seed", "3", "--eval-seed", "2000")


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    return start_demos(tmp_path_factory.mktemp("rounds"), {
        "passes_in_round_2": (*SEEDS, "--conf", PASSES_IN_ROUND_2),
        "sweep_then_round_2": ("--sweep", "--no-mlflow", *SEEDS, "--conf", EVERY_ROUND_FAILS),
    })


def test_round_1_fails_the_gate_and_round_2_resumes_from_it_and_passes(loops):
    proc, summary = loops["passes_in_round_2"]()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    first, second = summary["round_runs"]  # the loop stopped at the round that passed: no third run
    assert (first["state"], second["state"]) == ("failed", "success")
    one, two = ({t: s for t, s, _ in r["tasks"]} for r in (first, second))
    # Round 1: a verdict (the gate failed, nothing else), and the next round was planned and triggered.
    assert [t for t, s in one.items() if s == "failed"] == ["quality_gate", "run_outcome"], one
    assert one["plan_next_round"] == one["next_round"] == "success"
    # Round 2 released; no further round.
    assert two["quality_gate"] == "success" and two["deploy.deploy_to_robots"] == "success"
    assert two["plan_next_round"] == two["next_round"] == "skipped"
    assert summary["state"] == "success" and states(summary)["run_outcome"] == "success"

    lineage = summary["lineage"]
    rounds = lineage["rounds"]
    assert (rounds["round"], rounds["max_rounds"], rounds["outcome"]) == (2, 3, "passed")
    assert rounds["parent_run_id"] == first["run_id"] and rounds["next_run_id"] is None
    r1, r2 = rounds["rounds"]
    assert (r1["round"], r1["run_id"], r1["passed"], r1["successes"]) == (1, first["run_id"], False, 0)
    assert (r2["round"], r2["run_id"], r2["passed"]) == (2, second["run_id"], True)
    assert r2["success_rate"] >= 0.25 and r2["ci95"][0] <= r2["success_rate"] <= r2["ci95"][1]
    # Fresh seeds: round 2's episodes start where round 1's ended (eval_seed + eval_episodes), as recorded.
    assert (r1["first_seed"], r2["first_seed"]) == (2000, 2020)
    assert lineage["stages"]["evaluation"]["seeds"][0] == 2020 and len(lineage["stages"]["evaluation"]["seeds"]) == 20
    # Round 2 resumed from round 1's checkpoint (copied into its own folder, sha256 verified) and trained to 1 + 29.
    assert rounds["resumed_from"] == {"checkpoint_uri": r1["checkpoint_uri"], "sha256": r1["checkpoint_sha256"],
                                      "iteration": 1, "round": 1}
    manifest = lineage["stages"]["checkpoint"]
    assert manifest["resumed_from"] == f"s3://{BUCKET}/runs/{summary['run_key']}/checkpoints/agent_000001.pt"
    assert manifest["iteration"] == 30 and r2["checkpoint_sha256"] == lineage["chain"]["checkpoint_sha256"]
    # The picture of the rounds, and the rounds in the run note and the gate-failed notification.
    figure = lineage["figures"]["round_success"]
    assert figure["uri"] == f"s3://{BUCKET}/runs/{summary['run_key']}/report/round_success.png" and figure["points"] == 2
    assert "**Round 2 of 3**" in summary["run_note"] and "passed: the loop ends here" in summary["run_note"]
    assert f"retraining: round 2 is run `{second['run_id']}`" in first["note"]
    events = [n["event"] for n in summary["notifications"]]
    assert events == ["gate_failed", "run_failed", "approval_needed", "deployed"], events
    assert "round 2 follows as a new run of this DAG" in summary["notifications"][0]["message"]
    from sim2real.orchestration.lineage import lineage_errors

    assert lineage_errors(lineage) == []


def test_when_every_round_fails_the_loop_ends_failed_with_each_rounds_success_rate(loops):
    """The all-fail loop: round 1 (a sweep whose winner fails the gate) and round 2 (the winner retrained on the
    single-job path) both fail; the second is the last round, so nothing is planned after it."""
    proc, summary = loops["sweep_then_round_2"]()
    assert proc.returncode == 1, proc.stdout[-6000:] + proc.stderr[-6000:]
    first, second = summary["round_runs"]
    assert (first["state"], second["state"]) == ("failed", "failed")
    two = {t: s for t, s, _ in second["tasks"]}
    assert two["quality_gate"] == "failed" and two["plan_next_round"] == "skipped" and two["next_round"] == "skipped"
    rounds = summary["lineage"]["rounds"]
    assert (rounds["round"], rounds["outcome"], rounds["next_run_id"]) == (2, "gate_failed", None)
    assert [(r["round"], r["passed"], r["first_seed"]) for r in rounds["rounds"]] == [(1, False, 2000), (2, False, 2020)]
    assert all(r["ci95"][0] < 0.83 for r in rounds["rounds"])
    assert summary["lineage"]["figures"]["round_success"]["points"] == 2
    assert "the loop ends with the gate failed" in summary["run_note"]
    messages = [n["message"] for n in summary["notifications"] if n["event"] == "gate_failed"]
    assert len(messages) == 2 and "last retraining round (2 of 2)" in messages[1]


def test_a_sweep_with_rounds_retrains_its_winner_in_round_2_and_sums_the_loops_cost(loops):
    """Round 1 is a 3-candidate sweep, its winner fails the gate (a 95% lower bound of 0.83, reached only by 20/20
    episodes); round 2 retrains the winner's params from its checkpoint, without a sweep, and fails too. Checks the
    link between the two, the same whole-loop estimate in both, and the loop's actual cost in round 2."""
    proc, summary = loops["sweep_then_round_2"]()
    assert proc.returncode == 1, proc.stdout[-6000:] + proc.stderr[-6000:]
    first, second = summary["round_runs"]
    assert (first["state"], second["state"]) == ("failed", "failed")
    one, two = ({t: s for t, s, _ in r["tasks"]} for r in (first, second))
    # round 1 swept (pick_best ran) and triggered round 2; round 2 trained one policy on the single-job path
    assert one["pick_best"] == "success" and one["next_round"] == "success"
    assert two["pick_best"] == "skipped" and two["train.train_policy"] == "success"
    lineage = summary["lineage"]
    rounds = lineage["rounds"]
    sweep = rounds["sweep"]
    assert sweep["run_id"] == first["run_id"] and sweep["candidates"] == 3 and sweep["failed"] == 0
    winner = int(sweep["winner"][1:])
    assert lineage["params"]["sweep"] is None and lineage["params"]["seed"] == 3 + winner  # the winner's params
    assert lineage["sweep"] is None and len(lineage["candidates"]) == 1
    r1, r2 = rounds["rounds"]
    # round 1's row is the winner's confirmation on the gate's episodes; round 2 resumed from its checkpoint
    assert f"/candidates/{sweep['winner']}/checkpoints/" in r1["checkpoint_uri"]
    assert rounds["resumed_from"]["checkpoint_uri"] == r1["checkpoint_uri"]
    assert (r1["first_seed"], r2["first_seed"]) == (2000, 2020)  # the candidates were evaluated from 2040 on
    # the same whole-loop estimate in both rounds: 3 candidates + round 2's training
    items = lineage["cost_estimate"]["items"]
    assert [i.get("candidate") for i in items if i["stage"] == "training"] == ["c0", "c1", "c2", None]
    # the loop's actual cost: round 1's (from its lineage.json, its 3 jobs) + round 2's
    loop = lineage["cost_actual"]["loop"]
    assert [r["round"] for r in loop["rounds"]] == [1, 2] and loop["unknown_rounds"] == []
    assert loop["total_usd"] == round(sum(r["total_usd"] for r in loop["rounds"]), 2)
    assert loop["rounds"][1]["total_usd"] == lineage["cost_actual"]["total_usd"]
    assert "loop so far (rounds 1-2)" in summary["run_note"]
    assert summary["lineage"]["figures"]["round_success"]["points"] == 2
    from sim2real.orchestration.lineage import lineage_errors

    assert lineage_errors(lineage) == []
