"""Run ``sim_to_real`` with ``training_backend: hyperpod`` and a 3-candidate sweep (2 at once) in the sandbox: one
Slurm job array, one array task per candidate. Writes a JSON summary (tasks, mapped tasks' states, HyperPod
group counts, UpdateCluster requests, the emulated Slurm's job records, the lineage). Run in a fresh process:
Airflow reads its config at import.

    python -m tests.e2e.hyperpod_sweep_run --home DIR --json-out FILE   (from the repository root)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.fresh_process import script_args

CONF = {
    "training_backend": "hyperpod", "train_time_budget_seconds": 300, "max_iterations": 2,
    "run_vla_finetune": False, "deploy_to_edge": False, "eval_episodes": 3, "min_success_rate": 0.0,
    "sweep": [{"seed": 3}, {"seed": 4}, {"seed": 5}], "sweep_max_parallel": 2,
}


def main() -> int:
    args = script_args()

    from sim2real.contract.run_key import make_run_key
    from sim2real.dev.demo import mapped_states, prepare_airflow_home, run_dag, task_table
    from sim2real.dev.sandbox import Sandbox

    with Sandbox(step_seconds=0.05, echo=print) as sandbox:
        config = sandbox.provision()
        prepare_airflow_home(Path(args.home), sandbox.airflow_env())
        sm = sandbox.client("sagemaker", internal=True)
        cluster = config["hyperpod"]["cluster_name"]
        dag_run = run_dag(dict(CONF))
        groups = {g["InstanceGroupName"]: {"current": g.get("CurrentCount"), "target": g.get("TargetCount")}
                  for g in sm.describe_cluster(ClusterName=cluster)["InstanceGroups"]}
        key = make_run_key(dag_run.dag_id, dag_run.run_id)
        s3 = sandbox.client("s3", internal=True)
        try:
            lineage = json.loads(s3.get_object(Bucket=config["artifacts_bucket"],
                                               Key=f"runs/{key}/lineage.json")["Body"].read())
        except Exception:  # noqa: BLE001 - reported by the test
            lineage = None
        summary = {
            "state": str(getattr(dag_run.state, "value", dag_run.state)), "run_key": key,
            "bucket": config["artifacts_bucket"], "tasks": task_table(dag_run), "mapped_tasks": mapped_states(dag_run),
            "groups": groups, "cluster_updates": [e.message for e in sandbox.events if e.kind == "cluster-update"],
            "slurm_jobs": sandbox.slurm.jobs(), "lineage": lineage,
        }
    Path(args.json_out).write_text(json.dumps(summary, default=str, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
