"""Environment variables the Airflow side sets for the training containers (AWS Batch job, HyperPod Slurm
job) and that the trainer (``sim2real-train``) and the publisher read; the MLflow tracking variables, also set
for the evaluation command and the GR00T fine-tune (:mod:`sim2real.contract.tracking`).

Standard library only. The values are strings (container environments carry strings).
"""

from __future__ import annotations

TASK = "TASK"  #: task id (``sim2real.contract.tasks``)
MAX_ITERATIONS = "MAX_ITERATIONS"  #: PPO iterations
NUM_ENVS = "NUM_ENVS"  #: vectorised environments per process
SEED = "SEED"  #: training seed (rank r uses SEED + r)
OUTPUT_URI = "OUTPUT_URI"  #: checkpoint folder (``s3://…/runs/<run_key>/checkpoints/`` or a path)
RUN_KEY = "RUN_KEY"  #: the run key (``sim2real.contract.run_key``)
TIME_BUDGET_SECONDS = "TIME_BUDGET_SECONDS"  #: wall-clock budget of the training loop, seconds; unset = none
IMAGE_DIGEST = "IMAGE_DIGEST"  #: ``sha256:<hex>`` of the image the job runs (set by the Batch operator)
CHECKPOINT_INTERVAL = "CHECKPOINT_INTERVAL"  #: iterations between checkpoints (trainer default when unset)
DIGEST_INTERVAL = "DIGEST_INTERVAL"  #: iterations between cross-rank parameter digests (0 = off)
DEVICE = "DEVICE"  #: ``auto`` / ``cpu`` / ``cuda``
#: A retraining round (round 2 on): the checkpoint ``prepare_run`` copied into ``OUTPUT_URI`` to resume from
#: (``…/agent_<n>.pt``) and the PPO iteration it is at (a non-negative integer). The Isaac Lab launcher's resume
#: discovery reads them when no manifest in ``OUTPUT_URI`` gives the iteration (the copy has none); the project
#: trainer reads the iteration from the checkpoint itself.
RESUMED_CHECKPOINT_URI = "SIM2REAL_RESUMED_CHECKPOINT_URI"
RESUMED_ITERATION = "SIM2REAL_RESUMED_ITERATION"

#: What ``plan_run`` always sets for a training job (``TIME_BUDGET_SECONDS`` only with a budget).
TRAINING = (TASK, MAX_ITERATIONS, NUM_ENVS, SEED, OUTPUT_URI, RUN_KEY)

# --- Experiment tracking (MLflow). The first four are MLflow's own (``mlflow.environment_variables``), so the
# MLflow client picks them up as it would anywhere; the last two are ours.
#: ``http(s)://host:port`` of an MLflow tracking server or a SageMaker MLflow ARN (resolved by the
#: ``sagemaker-mlflow`` plugin). Unset or empty: tracking off.
MLFLOW_TRACKING_URI = "MLFLOW_TRACKING_URI"
MLFLOW_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"  #: the experiment (id) the run belongs to
MLFLOW_EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"  #: the experiment by name (the fine-tune's steps)
#: the stage's child run, created by the Airflow side; the workload logs into it (and resumes it on retry)
MLFLOW_RUN_ID = "MLFLOW_RUN_ID"
#: the DAG run's parent run (recorded on a run the workload has to create itself, e.g. a manual run)
MLFLOW_PARENT_RUN_ID = "SIM2REAL_MLFLOW_PARENT_RUN_ID"
#: metrics are sent in batches (``log_batch``) of at most this many iterations' worth (default 10)
MLFLOW_FLUSH_EVERY = "SIM2REAL_MLFLOW_FLUSH_EVERY"

#: The tracking variables, in the order a launcher passes them on.
TRACKING = (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_ID, MLFLOW_RUN_ID, MLFLOW_PARENT_RUN_ID, MLFLOW_FLUSH_EVERY)
