"""``make demo`` trains for a number of PPO iterations, with wall time only as a safety bound, so a busy and a quiet
machine train the same policy and the gate reaches the same verdict (a 60 s budget gave 48 iterations on a busy
2-core laptop and 78-92 on a quiet one: the run failed its gate on the busy one)."""

from __future__ import annotations

from airflow.sdk.definitions.param import ParamsDict

from sim2real.dev.demo import DEFAULT_EVAL_SEED, DEFAULT_SEED, DEMO_TRAINING, demo_conf
from sim2real.orchestration.params import check_conf_keys
from sim2real.orchestration.stages.run import build_params, check_params

#: Seconds one PPO iteration of the demo's training takes on a quiet 2-core machine (32 envs, Reacher-v5: 100
#: iterations in ~70 s), and how many times slower a machine may be before the safety bound cuts the training.
QUIET_ITERATION_S, SLOWDOWN = 0.7, 20


def test_the_demo_trains_an_iteration_budget_with_time_only_as_a_safety_bound():
    conf = demo_conf(DEFAULT_SEED, DEFAULT_EVAL_SEED)
    assert conf["max_iterations"] == DEMO_TRAINING["max_iterations"] == 100
    # The time budget never decides the demo's training: it is above 20x the quiet machine's time.
    assert conf["train_time_budget_seconds"] >= SLOWDOWN * QUIET_ITERATION_S * conf["max_iterations"]


def test_the_demo_conf_is_a_valid_run_conf_and_conf_still_wins():
    conf = demo_conf(DEFAULT_SEED, DEFAULT_EVAL_SEED, {"max_iterations": 5, "eval_episodes": 20})
    assert conf["max_iterations"] == 5 and conf["eval_episodes"] == 20
    params = build_params()
    check_conf_keys(conf, params)
    resolved = ParamsDict(params)
    resolved.update(conf)
    resolved.validate()
    check_params(dict(resolved.dump()))


@__import__("pytest").mark.integration  # migrates (copies) an Airflow DB in a fresh process
def test_the_demos_waits_poll_at_the_demos_interval_not_the_aws_default(tmp_path):
    """dag_defaults reads SIM2REAL_POLL_SECONDS at import, and prepare_airflow_home imported it before setting the
    variable: the demo's waits polled every 30 s and its canary listed the field episodes every 300 s."""
    import os
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path; from sim2real.dev.demo import prepare_airflow_home; "
            "prepare_airflow_home(Path(sys.argv[1]), {}); "
            "from sim2real.orchestration.dag_defaults import POLL, FIELD_POLL; print(POLL, FIELD_POLL)")
    env = {k: v for k, v in os.environ.items() if k != "SIM2REAL_POLL_SECONDS"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "home")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["2", "20"]


def test_a_canary_with_no_field_episode_is_refused_before_anything_starts(capsys):
    from sim2real.dev.demo import main

    assert main(["--field-episodes", "0", "--no-mlflow"]) == 2
    assert "--field-episodes 0 leaves the canary with no episode to judge" in capsys.readouterr().err


def test_the_provisioned_line_names_the_canary_thing_group():
    from sim2real.dev.demo import provisioned_line
    from sim2real.dev.sandbox.provision import CANARY_THING_GROUP

    env = {"artifacts_bucket": "b", "batch": {"job_queue": "q"}, "greengrass": {"thing_group_name": "sim2real-robots"}}
    line = provisioned_line("http://127.0.0.1:5000", env, canary=True)
    assert line == ("[demo] sandbox at http://127.0.0.1:5000; provisioned bucket b, job queue q, thing group "
                    f"sim2real-robots, canary thing group {CANARY_THING_GROUP}")
    assert provisioned_line("http://127.0.0.1:5000", env, canary=False).endswith(
        f"canary thing group {CANARY_THING_GROUP} (not used: --no-canary)")


def test_a_field_round_without_a_canary_is_refused_before_anything_starts(capsys):
    from sim2real.dev.demo import main

    assert main(["--field-round", "--no-canary", "--no-mlflow"]) == 2
    assert "--field-round needs a canary" in capsys.readouterr().err


def test_a_field_round_after_a_failed_first_run_publishes_nothing_and_runs_nothing(monkeypatch):
    """Before: the field data DAG ran and the loop ran again after a failed first run, and the demo's exit code and
    summary were the second run's alone (a failed first run could end in exit 0)."""
    from types import SimpleNamespace

    from sim2real.dev import demo

    calls = []
    monkeypatch.setattr(demo, "task_table", lambda run: [("train.train_policy", "failed", 1.0)])
    monkeypatch.setattr(demo, "run_note", lambda run: None)
    monkeypatch.setattr(demo, "run_field_data_dag", lambda *a, **k: calls.append("publish"))
    monkeypatch.setattr(demo, "run_rounds", lambda *a, **k: calls.append("second run"))
    out, second = demo.field_round({"seed": 3}, SimpleNamespace(run_id="manual__1", state="failed"))
    assert second == [] and calls == []
    assert out["first_run_state"] == "failed" and out["publish_state"] is None and out["dataset"] is None


def test_dag_test_runs_the_dag_after_a_full_collection_with_the_heap_frozen():
    """:func:`sim2real.dev.demo.dag_test` hands its arguments to ``dag.test`` and returns the run; before it, a full
    collection has freed a cycle of the oldest generation and the objects left are frozen, with the collector's
    third threshold at ``FULL_COLLECTION_THRESHOLD``. In a fresh interpreter: the freeze is for the whole process."""
    import json
    import subprocess
    import sys

    code = """if True:
        import gc, json, weakref
        from sim2real.dev.demo import FULL_COLLECTION_THRESHOLD, dag_test

        gc.disable()  # no automatic collection: only dag_test's can free the cycle

        class Node:
            pass

        node = Node()
        node.me = node
        gone = weakref.ref(node)
        gc.collect()  # node, still referenced, survives into the oldest generation
        del node  # now garbage that only a full collection frees
        seen = {"threshold": FULL_COLLECTION_THRESHOLD, "objects": len(gc.get_objects()),
                "frozen_before": gc.get_freeze_count(), "alive_before": gone() is not None}

        class Dag:
            def test(self, **kwargs):
                seen.update(kwargs=kwargs, frozen=gc.get_freeze_count(), alive=gone() is not None,
                            third_threshold=gc.get_threshold()[2])
                return "the run"

        seen["returned"] = dag_test(Dag(), run_conf={"seed": 3}, run_after=None)
        print(json.dumps(seen))
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout)
    assert seen["returned"] == "the run" and seen["kwargs"] == {"run_conf": {"seed": 3}, "run_after": None}
    assert seen["frozen_before"] == 0 and seen["alive_before"] is True
    assert seen["alive"] is False  # the full collection ran before the run
    assert seen["frozen"] >= seen["objects"] - 10  # everything else this process held was frozen
    assert seen["third_threshold"] == seen["threshold"] == 100
