"""Task ids of the ``sim_to_real`` DAG: the names the UI, the lineage, the run report, the orphan sweep, the
fault replay and the benchmark read.

A task inside a task group has the id ``<group>.<task>``; :func:`local` gives the part the group's builder
passes as ``task_id``. Standard library only: imported by the Airflow side and by the dev tools alike.
"""

from __future__ import annotations

# ---- task groups
BUILD_GROUP = "build"
PREFLIGHT_GROUP = "preflight"
TRAIN_GROUP = "train"
HYPERPOD_GROUP = "hyperpod"
HYPERPOD_EKS_GROUP = "hyperpod_eks"
SWEEP_GROUP = "sweep"
CHECKPOINT_GROUP = "checkpoint"
EVALUATE_GROUP = "evaluate"
VLA_GROUP = "vla"
DEPLOY_GROUP = "deploy"

# ---- run (outside any group)
PREPARE_RUN = "prepare_run"
CHECK_RESOURCES = "check_resources"
TRAINING_BACKEND = "training_backend"
QUALITY_GATE = "quality_gate"
PLAN_NEXT_ROUND = "plan_next_round"
NEXT_ROUND = "next_round"
WRITE_LINEAGE = "write_lineage"
RUN_OUTCOME = "run_outcome"

# ---- build
BUILD_IMAGE = f"{BUILD_GROUP}.build_image"

# ---- AWS Batch training
BATCH_CHECK_CAPACITY = f"{PREFLIGHT_GROUP}.check_capacity"
BATCH_TRAIN_POLICY = f"{TRAIN_GROUP}.train_policy"

# ---- SageMaker HyperPod training
HYPERPOD_CHECK_CAPACITY = f"{HYPERPOD_GROUP}.check_capacity"
HYPERPOD_SCALE_UP = f"{HYPERPOD_GROUP}.scale_up"
HYPERPOD_WAIT_FOR_NODES = f"{HYPERPOD_GROUP}.wait_for_nodes"
HYPERPOD_TRAIN_POLICY = f"{HYPERPOD_GROUP}.train_policy"
#: The scale-down teardown: outside the group, after it and after a HyperPod sweep's candidates (each candidate's
#: ``sweep.train_on_slurm`` waits on the group's job array, so a scale-down inside the group would make ``hyperpod``
#: and ``sweep`` depend on each other both ways: a task group cycle, which Airflow 3.5 refuses to import).
HYPERPOD_SCALE_DOWN = "hyperpod_scale_down"
HYPERPOD_SUBMISSION = f"{HYPERPOD_GROUP}.submission"  # branch: one Slurm job or a sweep's job array
HYPERPOD_SWEEP_SCRIPT = f"{HYPERPOD_GROUP}.sweep_script"
HYPERPOD_SUBMIT_SWEEP = f"{HYPERPOD_GROUP}.submit_sweep"  # sbatch --array: one array task per candidate

# ---- SageMaker HyperPod on Amazon EKS training (a Kubeflow PyTorchJob under Kueue task governance)
HYPERPOD_EKS_CHECK_CAPACITY = f"{HYPERPOD_EKS_GROUP}.check_capacity"
HYPERPOD_EKS_TRAIN_POLICY = f"{HYPERPOD_EKS_GROUP}.train_policy"
HYPERPOD_EKS_SUBMISSION = f"{HYPERPOD_EKS_GROUP}.submission"  # branch: one PyTorchJob, or a sweep's (one each)

# ---- sweep (several candidates in one run: a mapped task group, one map index per candidate; AWS Batch)
SWEEP_CHECK_CAPACITY = f"{PREFLIGHT_GROUP}.check_sweep_capacity"
SWEEP_CANDIDATES = "sweep_candidates"  # outside the mapped group: its return value is what the group maps over
SWEEP_WAIT_FOR_SLOT = f"{SWEEP_GROUP}.wait_for_slot"
SWEEP_SUBMIT_TRAINING = f"{SWEEP_GROUP}.submit_training"
SWEEP_TRAIN_POLICY = f"{SWEEP_GROUP}.train_policy"
SWEEP_TRAIN_ON_SLURM = f"{SWEEP_GROUP}.train_on_slurm"  # HyperPod: waits on the candidate's array task
SWEEP_TRAIN_ON_EKS = f"{SWEEP_GROUP}.train_on_eks"  # HyperPod EKS: the candidate's own PyTorchJob
SWEEP_WAIT_FOR_CHECKPOINT = f"{SWEEP_GROUP}.wait_for_checkpoint"
SWEEP_EVAL_COMMAND = f"{SWEEP_GROUP}.eval_command"
SWEEP_RUN_EVALUATION = f"{SWEEP_GROUP}.run_evaluation"
SWEEP_READ_EVAL_REPORT = f"{SWEEP_GROUP}.read_eval_report"
SWEEP_PICK_BEST = "pick_best"  # outside the mapped group: it reduces every candidate's result

# ---- checkpoint
TRAINING_JOB = f"{CHECKPOINT_GROUP}.training_job"
WAIT_FOR_CHECKPOINT = f"{CHECKPOINT_GROUP}.wait_for_checkpoint"

# ---- evaluation
EVAL_COMMAND = f"{EVALUATE_GROUP}.eval_command"
RUN_EVALUATION = f"{EVALUATE_GROUP}.run_evaluation"
READ_EVAL_REPORT = f"{EVALUATE_GROUP}.read_eval_report"
STOP_WORKSTATION = f"{EVALUATE_GROUP}.stop_workstation"

# ---- GR00T fine-tune and approval
VLA_ENABLED = f"{VLA_GROUP}.vla_enabled"
PIPELINE_DEFINITION = f"{VLA_GROUP}.pipeline_definition"
UPSERT_PIPELINE = f"{VLA_GROUP}.upsert_pipeline"
#: which field dataset version the fine-tune includes (form field ``field_dataset_version``), checked before it starts
FIELD_DATASET = f"{VLA_GROUP}.field_dataset"
FINETUNE_GROOT = f"{VLA_GROUP}.finetune_groot"
WAIT_FOR_APPROVAL = f"{VLA_GROUP}.wait_for_approval"

# ---- Greengrass deployment
DEPLOY_ENABLED = f"{DEPLOY_GROUP}.deploy_enabled"
DEPLOYMENT_COMPONENTS = f"{DEPLOY_GROUP}.deployment_components"
DEPLOY_TO_ROBOTS = f"{DEPLOY_GROUP}.deploy_to_robots"
#: the canary (form field ``canary_thing_group_name``; without one they succeed at once and do nothing)
CANARY_MODEL_VERSION = f"{DEPLOY_GROUP}.canary_model_version"
DEPLOY_TO_CANARY = f"{DEPLOY_GROUP}.deploy_to_canary"
CANARY_VERDICT = f"{DEPLOY_GROUP}.canary_verdict"
#: a person promotes or aborts the canary (form field ``canary_review``; without it, it succeeds at once)
CANARY_REVIEW = f"{DEPLOY_GROUP}.canary_review"

GROUPS = (BUILD_GROUP, PREFLIGHT_GROUP, TRAIN_GROUP, HYPERPOD_GROUP, HYPERPOD_EKS_GROUP, SWEEP_GROUP, CHECKPOINT_GROUP, EVALUATE_GROUP,
          VLA_GROUP, DEPLOY_GROUP)
#: The tasks of the sweep path (skipped in a run without a sweep).
SWEEP = (SWEEP_CHECK_CAPACITY, SWEEP_CANDIDATES, SWEEP_WAIT_FOR_SLOT, SWEEP_SUBMIT_TRAINING, SWEEP_TRAIN_POLICY,
         SWEEP_TRAIN_ON_SLURM, SWEEP_TRAIN_ON_EKS, SWEEP_WAIT_FOR_CHECKPOINT, SWEEP_EVAL_COMMAND, SWEEP_RUN_EVALUATION,
         SWEEP_READ_EVAL_REPORT, SWEEP_PICK_BEST)

#: The HyperPod tasks of a sweep (its job array; skipped in a run without a HyperPod sweep).
HYPERPOD_SWEEP = (HYPERPOD_SWEEP_SCRIPT, HYPERPOD_SUBMIT_SWEEP)
#: The tasks of the HyperPod path (skipped, the scale-down teardown included, in a run on AWS Batch).
HYPERPOD = (HYPERPOD_CHECK_CAPACITY, HYPERPOD_SCALE_UP, HYPERPOD_WAIT_FOR_NODES, HYPERPOD_SUBMISSION,
            HYPERPOD_TRAIN_POLICY, *HYPERPOD_SWEEP, HYPERPOD_SCALE_DOWN)
#: The training task of each sweep candidate, by ``training_backend`` (``pick_best`` and the report read it).
SWEEP_TRAINING_BY_BACKEND = {"batch": SWEEP_TRAIN_POLICY, "hyperpod": SWEEP_TRAIN_ON_SLURM,
                             "hyperpod_eks": SWEEP_TRAIN_ON_EKS}

#: Every task id of ``sim_to_real`` (the DAG integrity test checks the DAG has exactly these).
ALL = (
    PREPARE_RUN, CHECK_RESOURCES, TRAINING_BACKEND, BUILD_IMAGE, BATCH_CHECK_CAPACITY, BATCH_TRAIN_POLICY,
    *HYPERPOD, HYPERPOD_EKS_CHECK_CAPACITY, HYPERPOD_EKS_SUBMISSION, HYPERPOD_EKS_TRAIN_POLICY, *SWEEP, TRAINING_JOB, WAIT_FOR_CHECKPOINT,
    EVAL_COMMAND, RUN_EVALUATION,
    READ_EVAL_REPORT, STOP_WORKSTATION,
    QUALITY_GATE, PLAN_NEXT_ROUND, NEXT_ROUND, VLA_ENABLED, PIPELINE_DEFINITION, UPSERT_PIPELINE, FIELD_DATASET,
    FINETUNE_GROOT, WAIT_FOR_APPROVAL,
    DEPLOY_ENABLED, DEPLOYMENT_COMPONENTS, CANARY_MODEL_VERSION, DEPLOY_TO_CANARY, CANARY_VERDICT, CANARY_REVIEW,
    DEPLOY_TO_ROBOTS, WRITE_LINEAGE, RUN_OUTCOME,
)


def local(task_id: str) -> str:
    """The id a task is created with inside its group: ``"evaluate.run_evaluation"`` → ``"run_evaluation"``."""
    return task_id.rsplit(".", 1)[-1]
