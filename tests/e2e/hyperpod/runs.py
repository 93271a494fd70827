"""Run ``sim_to_real`` on both HyperPod backends in one sandbox, one Airflow home and one process, one run after
another, and write a JSON summary of each run (tasks, mapped tasks' states, HyperPod group counts, the UpdateCluster
requests, Slurm jobs, Kubernetes jobs and preemptions the run made, its manifest, evaluation report and lineage):

1. ``hyperpod/success``: ``training_backend: hyperpod``, scale up, one Slurm job, scale down, then checkpoint and
   evaluation;
2. ``hyperpod/slurm_job_fail``: the same, its Slurm job forced to fail (fault ``slurm_job_fail``);
3. ``hyperpod_sweep``: a 3-candidate sweep on HyperPod, 2 at once (one Slurm job array);
4. ``hyperpod_eks``: ``training_backend: hyperpod_eks``, one policy whose PyTorchJob Kueue preempts once while it
   trains (fault ``eks_preempt_after_seconds``), readmitted, released;
5. ``hyperpod_eks/sweep``: a 2-candidate sweep on EKS, one PyTorchJob per candidate, not preempted.

What a run made is what the sandbox holds after it less what it held before it (Slurm jobs by id, events by count),
so each test reads its own run's, not an earlier run's; the log has a line :data:`MARK` ``<name>`` before each run's
part. One process pays Airflow's start (imports, the in-process execution API, the DAG folder's parse) once for the
five runs; the price: a test of one of them waits for all five (about 150 s on a quiet machine), and an error in this
script fails all five tests. Run in a fresh process: Airflow reads its config at import.

    python -m tests.e2e.hyperpod.runs --home DIR --json-out FILE   (from the repository root)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.fresh_process import script_args

#: The HyperPod (Slurm) runs' conf: toy size, no fine-tune or release, the gate open.
CONF = {
    "training_backend": "hyperpod", "train_time_budget_seconds": 300, "max_iterations": 2,
    "run_vla_finetune": False, "deploy_to_edge": False, "eval_episodes": 3, "min_success_rate": 0.0,
}
#: The HyperPod sweep: three candidates, two at once (one job array with ``%2``).
SWEEP_CONF = {**CONF, "sweep": [{"seed": 3}, {"seed": 4}, {"seed": 5}], "sweep_max_parallel": 2}
#: The HyperPod EKS runs' conf.
EKS_CONF = {**CONF, "training_backend": "hyperpod_eks"}
#: The EKS sweep: two candidates, both at once.
EKS_SWEEP_CONF = {**EKS_CONF, "sweep": [{"seed": 3}, {"seed": 4}], "sweep_max_parallel": 2}
#: The log line that starts each run's part of the log, followed by the run's name.
MARK = "[hyperpod-runs] run "
#: Seconds after its process started that the EKS job is preempted (the toy training takes longer to start up), and
#: how long Kueue holds it before readmitting it.
PREEMPT = {"eks_preempt_after_seconds": 1.0, "eks_preempt_hold_seconds": 3.0}


def _s3_json(s3, bucket: str, key: str) -> Any:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except Exception:  # noqa: BLE001 - absent when the step did not run (the failed run's manifest)
        return None


def _eks_jobs(sandbox, run_key: str) -> list[dict]:
    """The PyTorchJobs of run ``run_key`` the emulated API server knows."""
    return [{"namespace": o["metadata"]["namespace"], "name": o["metadata"]["name"], "uid": o["metadata"].get("uid"),
             "labels": o["metadata"].get("labels"), "suspend": o["spec"]["runPolicy"].get("suspend"),
             "conditions": {c["type"]: c["status"] for c in o["status"]["conditions"]}}
            for (plural, _, _), o in sandbox.kubernetes.objects.items()
            if plural == "pytorchjobs" and (o["metadata"].get("labels") or {}).get("sim2real.io/run-key") == run_key]


def run(sandbox, config: dict, conf: dict, faults: dict) -> dict:
    """One DAG run of ``conf`` with ``faults`` (the only ones set while it runs); its summary."""
    from sim2real.contract.run_key import make_run_key
    from sim2real.dev.demo import mapped_states, run_dag, task_table

    sandbox.faults.clear()
    sandbox.faults.update(faults)
    slurm_before = {j["job_id"] for j in sandbox.slurm.jobs()}
    events_before = len(sandbox.events)
    dag_run = run_dag(dict(conf))
    events = list(sandbox.events)[events_before:]
    key = make_run_key(dag_run.dag_id, dag_run.run_id)
    sm, s3 = sandbox.client("sagemaker", internal=True), sandbox.client("s3", internal=True)
    cluster, bucket = config["hyperpod"]["cluster_name"], config["artifacts_bucket"]
    groups = {g["InstanceGroupName"]: {"current": g.get("CurrentCount"), "target": g.get("TargetCount")}
              for g in sm.describe_cluster(ClusterName=cluster)["InstanceGroups"]}
    nodes = sm.list_cluster_nodes(ClusterName=cluster)["ClusterNodeSummaries"]
    return {
        "state": str(getattr(dag_run.state, "value", dag_run.state)), "run_key": key, "bucket": bucket,
        "tasks": task_table(dag_run), "mapped_tasks": mapped_states(dag_run), "groups": groups,
        "gpu_nodes": len([n for n in nodes if n["InstanceGroupName"] == "gpu"]),
        "cluster_updates": [e.message for e in events if e.kind == "cluster-update"],
        "slurm_jobs": [j for j in sandbox.slurm.jobs() if j["job_id"] not in slurm_before],
        "jobs": _eks_jobs(sandbox, key),
        "preemption_events": [e.message for e in events if e.service == "eks" and "preempted" in e.message],
        "manifest": _s3_json(s3, bucket, f"runs/{key}/checkpoints/manifest.json"),
        "report": _s3_json(s3, bucket, f"runs/{key}/eval/report.json"),
        "lineage": _s3_json(s3, bucket, f"runs/{key}/lineage.json"),
    }


#: ``(name, conf, faults)`` of each run, in the order they run.
RUNS = (
    ("hyperpod/success", CONF, {}),
    ("hyperpod/slurm_job_fail", CONF, {"slurm_job_fail": True}),
    ("hyperpod_sweep", SWEEP_CONF, {}),
    ("hyperpod_eks", EKS_CONF, PREEMPT),
    ("hyperpod_eks/sweep", EKS_SWEEP_CONF, {}),
)


def main() -> int:
    args = script_args()

    from sim2real.dev.demo import prepare_airflow_home
    from sim2real.dev.sandbox import Sandbox

    sys.stdout.reconfigure(line_buffering=True)  # a run's lines before the next run's MARK (stderr is unbuffered)
    summary = {}
    with Sandbox(step_seconds=0.05, echo=print) as sandbox:
        config = sandbox.provision()
        prepare_airflow_home(Path(args.home), sandbox.airflow_env())
        for name, conf, faults in RUNS:
            print(f"{MARK}{name}")
            summary[name] = run(sandbox, config, conf, faults)
    Path(args.json_out).write_text(json.dumps(summary, default=str, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
