"""``make bench``: measure on this machine and print one table (also written to bench-results.json).

Rows:

* DAG file parse time: median wall time of parsing ``dags/sim_to_real.py`` with a DagBag, each
  parse in a fresh interpreter (what the dag-processor pays per file), seconds; beside it the same
  figure for ``bench/provider_dag.py``, a plain Amazon-provider DAG with the same task count (the
  installed provider ships no example DAGs); and ``dags/sim_to_real.py`` parsed as the Airflow 3 dag-processor
  parses it (:func:`sim2real.dev.bench_parse.processor_parse`: the manager pre-imports the ``airflow.*`` modules the file names, then the
  file's own parse), quiet and with two CPU-bound processes beside it (a busy 2-core laptop);
* orchestration, from one sandbox run of the DAG (tiny training, ``SIM2REAL_POLL_SECONDS=2``), in a
  subprocess: per waiting stage, the latency from the resource reaching its terminal state (sandbox
  event time) to the next task's start (task instance ``start_date``); the worker-slot seconds the
  deferrable task held (in the worker before deferring + after resuming) against the same wait in
  poke mode (the whole wait); AWS API calls per hour of waiting (calls to that stage's service while
  its trigger waited);
* trainer env-steps/s with 1 and 8 vectorised environments (Reacher-v5, the trainer's env loop);
* policy quality after a wall-time budget (default 60 s and 120 s of training), ours (``sim2real-train``,
  NUM_ENVS 32) against Stable-Baselines3 PPO with rl-baselines3-zoo's Reacher hyper-parameters (8 envs), each
  run one after the other on this machine for the same wall time, seeds 3, 4, 5: the median success rate over
  seeds, the Wilson 95 % interval of all seeds' episodes pooled (100 evaluation episodes per seed, seeds
  2000..2099), each seed's rate and the median env-steps/s (:mod:`sim2real.workloads.bench`). ``--rl-budgets``,
  ``--rl-seeds`` and ``--only rl`` make it shorter;
* optional (``--only waits``, ``--only waits-hour``): waits by polling vs by AWS events through the Batch
  trigger, at 1, 10 and 50 concurrent waits in the sandbox: resume latency p50/p95 and triggerer CPU of short
  waits, and the AWS calls (SQS and DescribeJobs) of a waiting hour, measured time-scaled by 20
  (:mod:`sim2real.dev.bench_waits`);
* a sweep of 3 candidates (training seeds 3, 4, 5; toy training of 10 s, 10 evaluation episodes) in one DAG
  run against 3 runs of one candidate each, one after the other (each in a fresh process and sandbox account
  holding 3 nodes): wall time and AWS API calls the sandbox served (``--only sweep`` for these rows alone);
* the feedback loop (``--only feedback`` for these rows alone): ``make lint`` from an empty lint venv and again,
  ``make test-unit``, measured; the whole suite (``make test``) as a recorded measurement, labelled so, or measured
  with ``--suite`` (:mod:`sim2real.dev.bench_feedback`);
* policy server latency p50/p99 (ms) and throughput (requests/s) over real ZMQ on loopback,
  onnxruntime on CPU, serving the ONNX export of a freshly trained toy policy; and an authenticated
  client's p50/p99 under an unauthenticated flood of many-array requests from 2 other processes, beside the
  same client alone in the same run (``--only policy-flood`` for these rows alone;
  :func:`sim2real.edge.benchmark.flood_latency`);
* a tracking outage (``--only tracking``): the trainer (Reacher-v5, 4 envs, metrics sent every iteration) for a
  fixed time budget (``--tracking-budget``, default 20 s) with the local MLflow server up, then with a server
  that accepts connections and never answers from the first call; the anchor beside them: the same training
  without tracking. Iterations within the budget, the loop's own time in tracking calls, the end's wait for
  them and the job's wall time (:func:`tracking_outage`);
* the field loop (``--only field`` for these rows alone, :mod:`sim2real.dev.bench_field`): the canary wait's S3
  calls per waiting hour and worker-slot seconds, beside a wait that reads every object and a poke sensor, and the
  field report ingestion rate beside plain list + read.

Numbers depend on the machine and its load; they are measurements, not test assertions.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim2real.contract import env_vars as ev
from sim2real.dev.bench_orchestration import (_orchestration_subprocess, _sweep_rows, orchestration_run,
                                              sweep_bench_run, sweep_comparison)
from sim2real.dev.bench_parse import _parse_rows, dag_parse_seconds, processor_parse_seconds

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root


def _toy_policy_onnx(tmp: str) -> str:
    """Train a 1-iteration toy policy in ``tmp`` and export it to ONNX; returns the .onnx path."""
    from sim2real.workloads.export import export_onnx

    env = {**os.environ, ev.TASK: "Reacher-v5", ev.MAX_ITERATIONS: "1", ev.NUM_ENVS: "2", ev.OUTPUT_URI: tmp}
    env.pop("AWS_ENDPOINT_URL", None)
    subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, check=True, capture_output=True)
    manifest = json.loads(Path(tmp, "manifest.json").read_text())
    onnx_path = str(Path(tmp, "policy.onnx"))
    export_onnx(str(Path(tmp, manifest["checkpoint_uri"].rsplit("/", 1)[-1])), onnx_path)
    return onnx_path


def policy_latency(n: int = 1000) -> dict[str, Any]:
    """Train a 1-iteration toy policy, export it to ONNX and measure the policy server over ZMQ."""
    from sim2real.edge.benchmark import policy_server_latency

    with tempfile.TemporaryDirectory() as tmp:
        return policy_server_latency(_toy_policy_onnx(tmp), n=n)


def policy_flood() -> dict[str, Any]:
    """The toy policy's server: an authenticated client alone, then under an unauthenticated many-array flood
    from 2 other processes (:func:`sim2real.edge.benchmark.flood_latency`)."""
    from sim2real.edge.benchmark import flood_latency

    with tempfile.TemporaryDirectory() as tmp:
        return flood_latency(_toy_policy_onnx(tmp))


def _flood_rows(f: dict[str, Any]) -> list[tuple[str, str]]:
    within = f["flood"]["p99_ms"] < f["decode_ms"]
    return [
        (f"policy server get_action p50 / p99 under an unauthenticated flood ({f['flooders']} processes, requests of "
         f"{f['flood_arrays']} arrays, {f['flood_request_bytes'] / 2**20:.1f} MiB; {f['flood_rps']:.0f} refused/s)",
         f"{f['flood']['p50_ms']:.2f} / {f['flood']['p99_ms']:.2f} ms ({'within' if within else 'OVER'} the bound: "
         f"p99 < one decode of a flood request, {f['decode_ms']:.0f} ms)"),
        ("anchor: the same client alone, same server, same run (p50 / p99)",
         f"{f['alone']['p50_ms']:.2f} / {f['alone']['p99_ms']:.2f} ms (refusing one flood request: "
         f"{f['refuse_ms']:.2f} ms)"),
    ]


def _machine() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPU ({cpu}), Python {platform.python_version()}, {platform.system()}"


#: (label, trainer, NUM_ENVS) of the policy-quality rows.
RL_TRAINERS = (("ours (skrl PPO)", "ours", 32), ("Stable-Baselines3 PPO, rl-zoo hyper-parameters", "sb3", 8))


def policy_quality(*, task: str = "Reacher-v5", budgets: list[float], seeds: list[int]) -> dict[str, Any]:
    """Train each of :data:`RL_TRAINERS` once per seed for ``max(budgets)`` seconds; success at every budget.

    :return: ``{"task", "budgets", "seeds", "runs": [per-run results], "summary": {trainer: {budget: {...}}}}``;
        a summary entry holds ``median``, ``per_seed``, the pooled ``successes``/``episodes`` and ``ci95``
        (Wilson) and the median ``env_steps_per_s``.
    """
    from sim2real.contract.stats import wilson_interval
    from sim2real.workloads.bench import EVAL_EPISODES, EVAL_SEED, train_ours, train_sb3

    eval_seeds = list(range(EVAL_SEED, EVAL_SEED + EVAL_EPISODES))
    runs, summary = [], {}
    for label, trainer, num_envs in RL_TRAINERS:
        train = train_ours if trainer == "ours" else train_sb3
        mine = [train(task=task, num_envs=num_envs, seed=seed, seconds=max(budgets), snapshots=budgets,
                      eval_seeds=eval_seeds) for seed in seeds]
        runs += mine
        per_budget = {}
        for budget in budgets:
            snaps = [next(s for s in r["snapshots"] if s["at_s"] == budget) for r in mine]
            k, n = sum(s["successes"] for s in snaps), sum(s["episodes"] for s in snaps)
            per_budget[str(budget)] = {"median": statistics.median(s["success_rate"] for s in snaps),
                                       "per_seed": [s["success_rate"] for s in snaps], "successes": k,
                                       "episodes": n, "ci95": list(wilson_interval(k, n))}
        summary[trainer] = {"label": label, "num_envs": num_envs, "budgets": per_budget,
                            "env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in mine)}
    return {"task": task, "budgets": budgets, "seeds": seeds, "runs": runs, "summary": summary}


def _quality_rows(quality: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    seeds = "/".join(str(s) for s in quality["seeds"])
    for entry in quality["summary"].values():
        for budget, b in entry["budgets"].items():
            rows.append(((f"{quality['task']} success after {float(budget):g} s of training, {entry['label']}, "
                          f"{entry['num_envs']} envs: median [pooled Wilson 95%]; seeds {seeds}"),
                         (f"{b['median']:.2f} [{b['ci95'][0]:.2f}, {b['ci95'][1]:.2f}]; "
                          + " / ".join(f"{x:.2f}" for x in b["per_seed"]))))
        rows.append(((f"{quality['task']} env-steps/s while training, {entry['label']}, {entry['num_envs']} envs "
                      "(median of seeds)"), f"{entry['env_steps_per_s']:.0f}"))
    return rows


def _parse_main(argv: list[str]):
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.bench", description="make bench")
    ap.add_argument("--only", choices=("all", "rl", "waits", "waits-hour", "sweep", "policy-flood", "tracking", "field",
                                       "feedback", "parse"), default="all",
                    help="rl: only the policy-quality rows (ours vs Stable-Baselines3); waits: only the wait rows, "
                         "polling vs events (sim2real.dev.bench_waits, 1/10/50 concurrent Batch waits in the sandbox: "
                         "short waits, then the waiting hour time-scaled by 20); waits-hour: only the waiting-hour "
                         "rows; "
                         "sweep: only the rows of a 3-candidate sweep against 3 runs one after the other; "
                         "policy-flood: only the policy server rows alone vs under an unauthenticated flood; "
                         "tracking: only the rows of training with MLflow up, down and off; "
                         "field: only the canary wait's S3 calls and worker-slot time and the field report ingestion; "
                         "feedback: only make lint (from an empty lint venv) and make test-unit, measured "
                         "(sim2real.dev.bench_feedback); "
                         "parse: only the DAG parse and serialization rows, ours beside the plain-provider DAG")
    ap.add_argument("--tracking-budget", type=float, default=20.0, help="training seconds of the tracking rows")
    ap.add_argument("--suite", action="store_true",
                    help="with the feedback rows, also measure make test (the whole suite); otherwise its row is "
                         "the recorded measurement, labelled so")
    ap.add_argument("--rl-budgets", default="60,120", help="training seconds at which success is measured")
    ap.add_argument("--rl-seeds", default="3,4,5", help="training seeds of each trainer")
    args = ap.parse_args(argv)
    args.rl_budgets = [float(x) for x in args.rl_budgets.split(",") if x.strip()]
    args.rl_seeds = [int(x) for x in args.rl_seeds.split(",") if x.strip()]
    if not args.rl_budgets or min(args.rl_budgets) <= 0 or not args.rl_seeds:
        ap.error("--rl-budgets needs positive seconds and --rl-seeds at least one seed")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--orchestration-run"]:
        orchestration_run(Path(argv[1]))
        return 0
    if argv[:1] == ["--sweep-run"]:
        sweep_bench_run(Path(argv[1]), seed=int(argv[2]), sweep=argv[3] == "1")
        return 0
    args = _parse_main(argv)
    from sim2real.workloads.bench import env_steps_per_second

    results: dict[str, Any] = {"machine": _machine()}
    if args.only in ("waits", "waits-hour"):
        from sim2real.dev import bench_waits

        rows = []
        if args.only == "waits":
            results["wait_events"] = bench_waits.run([1, 10, 50])
            rows += bench_waits.rows(results["wait_events"])
        results["wait_events_hour"] = bench_waits.run_hour([1, 10, 50])
        rows += bench_waits.hour_rows(results["wait_events_hour"])
        return _print_and_write(results, rows, "wait events only (sandbox)")
    if args.only == "sweep":
        results["sweep"] = sweep_comparison()
        return _print_and_write(results, _sweep_rows(results["sweep"]), "sweep only (sandbox)")
    if args.only == "policy-flood":
        results["policy_flood"] = policy_flood()
        return _print_and_write(results, _flood_rows(results["policy_flood"]), "policy server flood only")
    if args.only == "tracking":
        results["tracking_outage"] = tracking_outage(args.tracking_budget)
        return _print_and_write(results, _tracking_rows(results["tracking_outage"]), "tracking outage only")
    if args.only == "field":
        from sim2real.dev import bench_field

        results["field"] = bench_field.measure()
        return _print_and_write(results, bench_field.rows(results["field"]), "field loop only (moto S3)")
    if args.only == "feedback":
        from sim2real.dev import bench_feedback

        results["feedback"] = bench_feedback.measure(suite=args.suite)
        return _print_and_write(results, bench_feedback.rows(results["feedback"]), "feedback loop only")
    if args.only == "rl":
        results["policy_quality"] = policy_quality(budgets=args.rl_budgets, seeds=args.rl_seeds)
        rows = _quality_rows(results["policy_quality"])
        return _print_and_write(results, rows, "policy quality only")
    results["dag_parse"] = dag_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py")
    results["provider_dag_parse"] = dag_parse_seconds(REPO_ROOT / "bench" / "provider_dag.py")
    if args.only == "parse":
        return _print_and_write(results, _parse_rows(results), "DAG parse and serialization only")
    results["dag_parse_processor"] = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py")
    results["dag_parse_processor_busy"] = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py", repeats=3,
                                                                  busy=2)
    results["orchestration"] = _orchestration_subprocess()
    results["env_steps_per_s"] = {str(n): env_steps_per_second(n, seconds=5.0) for n in (1, 8)}
    results["policy_server"] = policy_latency()
    results["policy_flood"] = policy_flood()
    results["policy_quality"] = policy_quality(budgets=args.rl_budgets, seeds=args.rl_seeds)
    orch = results["orchestration"]
    rows = [
        *_parse_rows(results),
        ("DAG parse, dags/sim_to_real.py as the dag-processor parses it (after its pre-import), median of 5",
         f"{results['dag_parse_processor']['median_s']:.2f} s"),
        ("DAG parse, dags/sim_to_real.py as the dag-processor parses it, 2 CPU-bound processes beside it, median of 3",
         f"{results['dag_parse_processor_busy']['median_s']:.2f} s"),
    ]
    for task_id, st in orch["stages"].items():
        if "terminal_to_next_start_s" in st:
            rows.append((f"latency: {task_id} resource terminal -> {st['next_task']} starts (poll {orch['poll_seconds']} s)",
                         f"{st['terminal_to_next_start_s']:.1f} s"))
    for task_id, st in orch["stages"].items():
        if st["deferred"]:
            rows.append((f"worker slot: {task_id} deferrable / poke (whole wait)",
                         f"{st['worker_slot_s_deferrable']:.1f} s / {st['worker_slot_s_poke']:.1f} s"))
    for task_id, st in orch["stages"].items():
        if st["deferred"] and st["api_calls_per_hour_waiting"] is not None:
            scaled = st["api_calls_per_hour_waiting"] * orch["poll_seconds"] / 30
            rows.append((f"API calls per hour of waiting: {task_id}",
                         f"{st['api_calls_per_hour_waiting']:.0f} at poll {orch['poll_seconds']} s "
                         f"(~{scaled:.0f} at 30 s; {st['api_calls_while_waiting']} in {st['wait_s']:.1f} s)"))
    rows += [
        ("trainer env-steps/s, 1 env", f"{results['env_steps_per_s']['1']:.0f}"),
        ("trainer env-steps/s, 8 envs", f"{results['env_steps_per_s']['8']:.0f}"),
        ("policy server p50 / p99 (ZMQ, onnxruntime CPU)",
         f"{results['policy_server']['p50_ms']:.2f} / {results['policy_server']['p99_ms']:.2f} ms"),
        ("policy server throughput", f"{results['policy_server']['throughput_rps']:.0f} req/s"),
        ("anchor: ZMQ REQ/REP round trip of the same message sizes, no server work (p50 / p99)",
         "{p50_ms:.2f} / {p99_ms:.2f} ms".format(**results["policy_server"]["transport"])),
        *_flood_rows(results["policy_flood"]),
    ]
    rows += _quality_rows(results["policy_quality"])
    results["sweep"] = sweep_comparison()
    rows += _sweep_rows(results["sweep"])
    results["tracking_outage"] = tracking_outage(args.tracking_budget)
    rows += _tracking_rows(results["tracking_outage"])
    from sim2real.dev import bench_feedback, bench_field

    results["field"] = bench_field.measure()
    rows += bench_field.rows(results["field"])
    results["feedback"] = bench_feedback.measure(suite=args.suite)
    rows += bench_feedback.rows(results["feedback"])
    return _print_and_write(results, rows, f"sandbox run: {orch['state']}")


def _train_once(out: Path, budget_s: float, env_extra: dict[str, str]) -> dict[str, Any]:
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SIM2REAL_MLFLOW_"))}
    env.update({ev.TASK: "Reacher-v5", ev.MAX_ITERATIONS: "100000", ev.NUM_ENVS: "4", ev.OUTPUT_URI: str(out),
                "TIME_BUDGET_SECONDS": str(budget_s), "CHECKPOINT_INTERVAL": "100000", ev.RUN_KEY: "bench-tracking",
                ev.MLFLOW_FLUSH_EVERY: "1", "PYTHONPATH": str(REPO_ROOT / "include"), **env_extra})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, capture_output=True,
                          text=True, timeout=budget_s + 600)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError("bench training failed:\n" + proc.stderr[-3000:])
    manifest = json.loads((out / "manifest.json").read_text())
    tracking = manifest.get("tracking") or {}
    return {"iterations": manifest["iteration"], "wall_s": round(wall, 1), "caller_s": tracking.get("caller_s"),
            "close_wait_s": tracking.get("close_wait_s"), "not_recorded": tracking.get("not_recorded")}


def tracking_outage(budget_s: float = 20.0) -> dict[str, Any]:
    """The trainer for ``budget_s`` seconds with MLflow up (the local server), down (a socket that never answers,
    from the first call) and off (the anchor); see the module docstring.

    :return: ``{"budget_s", "up", "down", "off"}``, each ``{"iterations", "wall_s", "caller_s", "close_wait_s",
        "not_recorded"}`` (``up`` is ``{"skipped": reason}`` without the MLflow server venv).
    """
    import socket

    from sim2real.dev.sandbox.mlflow_server import MlflowServer, MlflowServerError

    results: dict[str, Any] = {"budget_s": budget_s}
    with tempfile.TemporaryDirectory(prefix="sim2real-bench-tracking-") as tmp:
        results["off"] = _train_once(Path(tmp, "off"), budget_s, {})
        try:
            server = MlflowServer(repo_root=REPO_ROOT, work_dir=Path(tmp, "mlflow"),
                                  artifacts_destination=Path(tmp, "artifacts").as_uri(), s3_endpoint_url="",
                                  aws_env={}).start()
        except MlflowServerError as err:
            results["up"] = {"skipped": str(err).splitlines()[0]}
        else:
            try:
                results["up"] = _train_once(Path(tmp, "up"), budget_s, {ev.MLFLOW_TRACKING_URI: server.url})
            finally:
                server.stop()
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(128)
        try:
            results["down"] = _train_once(Path(tmp, "down"), budget_s, {
                ev.MLFLOW_TRACKING_URI: f"http://127.0.0.1:{hole.getsockname()[1]}"})
        finally:
            hole.close()
    return results


def _tracking_rows(res: dict[str, Any]) -> list[tuple[str, str]]:
    def cell(r: dict[str, Any]) -> str:
        if "skipped" in r:
            return f"skipped ({r['skipped']})"
        return (f"{r['iterations']} it (loop in tracking {r['caller_s'] * 1000:.0f} ms, end waited {r['close_wait_s']:.1f} s, "
                f"job {r['wall_s']:.0f} s)")

    b = res["budget_s"]
    return [(f"training iterations in a {b:.0f} s budget, MLflow up / down from the first call (hanging server)",
             f"{cell(res['up'])} / {cell(res['down'])}"),
            (f"anchor: the same training without tracking, {b:.0f} s budget",
             f"{res['off']['iterations']} it (job {res['off']['wall_s']:.0f} s)")]


def _print_and_write(results: dict[str, Any], rows: list[tuple[str, str]], note: str) -> int:
    results["table"] = rows
    width = max(len(r[0]) for r in rows)
    print(f"\nmachine: {results['machine']}; {note}")
    print(f"| {'benchmark'.ljust(width)} | result |\n|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    out = REPO_ROOT / "bench-results.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
