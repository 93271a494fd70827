"""Run ``sim_to_real`` with ``training_backend: hyperpod`` in the sandbox, twice: a good run, then one whose
Slurm job fails (fault ``slurm_job_fail``). Writes a JSON summary per run (tasks, final HyperPod group
counts, UpdateCluster requests, Slurm jobs). Run in a fresh process: Airflow reads its config at import.

    python -m tests.e2e.hyperpod_run --home DIR --json-out FILE   (from the repository root)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.fresh_process import script_args

CONF = {
    "training_backend": "hyperpod", "train_time_budget_seconds": 300, "max_iterations": 2,
    "run_vla_finetune": False, "deploy_to_edge": False, "eval_episodes": 3, "min_success_rate": 0.0,
}


def main() -> int:
    args = script_args()

    from sim2real.dev.demo import prepare_airflow_home, run_dag, task_table
    from sim2real.dev.sandbox import Sandbox

    runs = []
    with Sandbox(step_seconds=0.05, echo=print) as sandbox:
        config = sandbox.provision()
        prepare_airflow_home(Path(args.home), sandbox.airflow_env())
        sm = sandbox.client("sagemaker", internal=True)
        cluster = config["hyperpod"]["cluster_name"]
        for name, faults in (("success", {}), ("slurm_job_fail", {"slurm_job_fail": True})):
            sandbox.faults.clear()
            sandbox.faults.update(faults)
            updates_before = len([e for e in sandbox.events if e.kind == "cluster-update"])
            dag_run = run_dag(dict(CONF))
            groups = {g["InstanceGroupName"]: {"current": g.get("CurrentCount"), "target": g.get("TargetCount")}
                      for g in sm.describe_cluster(ClusterName=cluster)["InstanceGroups"]}
            nodes = sm.list_cluster_nodes(ClusterName=cluster)["ClusterNodeSummaries"]
            updates = [e.message for e in sandbox.events if e.kind == "cluster-update"][updates_before:]
            manifest = None
            from sim2real.contract.run_key import make_run_key

            key = make_run_key(dag_run.dag_id, dag_run.run_id)
            s3 = sandbox.client("s3", internal=True)
            try:
                manifest = json.loads(s3.get_object(Bucket=config["artifacts_bucket"],
                                                    Key=f"runs/{key}/checkpoints/manifest.json")["Body"].read())
            except Exception:  # noqa: BLE001 - absent on the failed run
                manifest = None
            try:
                report = json.loads(s3.get_object(Bucket=config["artifacts_bucket"],
                                                  Key=f"runs/{key}/eval/report.json")["Body"].read())
            except Exception:  # noqa: BLE001
                report = None
            runs.append({
                "name": name, "state": str(getattr(dag_run.state, "value", dag_run.state)), "run_key": key,
                "tasks": task_table(dag_run), "groups": groups,
                "gpu_nodes": len([n for n in nodes if n["InstanceGroupName"] == "gpu"]),
                "cluster_updates": updates, "slurm_jobs": sandbox.slurm.jobs(), "manifest": manifest,
                "report": report,
            })
    Path(args.json_out).write_text(json.dumps({"runs": runs}, default=str, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
