"""Run ``sim_to_real`` with ``training_backend: hyperpod_eks`` in the sandbox, twice: first one policy, whose PyTorchJob
is preempted by Kueue once while it trains (fault ``eks_preempt_after_seconds``), readmitted, and the run goes on to
release the policy; then a 2-candidate sweep (:data:`SWEEP_CONF`), one PyTorchJob per candidate, whose best candidate
is released. Writes a JSON summary (tasks, the jobs the emulated API server knows, the manifest, the evaluation
report, the lineage; the sweep run's under ``sweep``). Run in a fresh process: Airflow reads its config at import.

    python -m tests.e2e.hyperpod_eks_run --home DIR --json-out FILE   (from the repository root)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.fresh_process import script_args

CONF = {
    "training_backend": "hyperpod_eks", "train_time_budget_seconds": 300, "max_iterations": 2,
    "run_vla_finetune": False, "deploy_to_edge": False, "eval_episodes": 3, "min_success_rate": 0.0,
}
#: The sweep run (toy size, as tests/e2e/hyperpod_sweep_run.py): two candidates, both at once.
SWEEP_CONF = {**CONF, "sweep": [{"seed": 3}, {"seed": 4}], "sweep_max_parallel": 2}
#: Seconds after its process started that the job is preempted (the toy training takes longer to start up).
PREEMPT_AFTER_S = 1.0


def _s3_json(s3, bucket: str, key: str):
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except Exception:  # noqa: BLE001 - absent when the step did not run
        return None


def _jobs(sandbox, run_key: str) -> list[dict]:
    """The PyTorchJobs of run ``run_key`` the emulated API server knows."""
    return [{"namespace": o["metadata"]["namespace"], "name": o["metadata"]["name"], "uid": o["metadata"].get("uid"),
             "labels": o["metadata"].get("labels"), "suspend": o["spec"]["runPolicy"].get("suspend"),
             "conditions": {c["type"]: c["status"] for c in o["status"]["conditions"]}}
            for (plural, _, _), o in sandbox.kubernetes.objects.items()
            if plural == "pytorchjobs" and (o["metadata"].get("labels") or {}).get("sim2real.io/run-key") == run_key]


def main() -> int:
    args = script_args()

    from sim2real.contract.run_key import make_run_key
    from sim2real.dev.demo import mapped_states, prepare_airflow_home, run_dag, task_table
    from sim2real.dev.sandbox import Sandbox

    with Sandbox(step_seconds=0.05, echo=print, faults={"eks_preempt_after_seconds": PREEMPT_AFTER_S,
                                                         "eks_preempt_hold_seconds": 3.0}) as sandbox:
        config = sandbox.provision()
        prepare_airflow_home(Path(args.home), sandbox.airflow_env())
        dag_run = run_dag(dict(CONF))
        key = make_run_key(dag_run.dag_id, dag_run.run_id)
        s3, bucket = sandbox.client("s3", internal=True), config["artifacts_bucket"]
        jobs = _jobs(sandbox, key)
        preemptions = [e.message for e in sandbox.events if e.service == "eks" and "preempted" in e.message]
        summary = {"state": str(getattr(dag_run.state, "value", dag_run.state)), "run_key": key,
                   "tasks": task_table(dag_run), "jobs": jobs, "preemption_events": preemptions,
                   "manifest": _s3_json(s3, bucket, f"runs/{key}/checkpoints/manifest.json"),
                   "report": _s3_json(s3, bucket, f"runs/{key}/eval/report.json"),
                   "lineage": _s3_json(s3, bucket, f"runs/{key}/lineage.json")}
        # The sweep: each candidate's own PyTorchJob (not preempted: the fault is the first run's).
        sandbox.faults.pop("eks_preempt_after_seconds", None)
        swept = run_dag(dict(SWEEP_CONF))
        sweep_key = make_run_key(swept.dag_id, swept.run_id)
        summary["sweep"] = {"state": str(getattr(swept.state, "value", swept.state)), "run_key": sweep_key,
                            "bucket": bucket, "tasks": task_table(swept), "mapped_tasks": mapped_states(swept),
                            "jobs": _jobs(sandbox, sweep_key),
                            "wall_s": (swept.end_date - swept.start_date).total_seconds(),
                            "lineage": _s3_json(s3, bucket, f"runs/{sweep_key}/lineage.json")}
    Path(args.json_out).write_text(json.dumps(summary, default=str, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
