"""Environment variables the Airflow side sets for the training containers (AWS Batch job, HyperPod Slurm
job) and that the trainer (``sim2real-train``) and the publisher read.

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

#: What ``plan_run`` always sets for a training job (``TIME_BUDGET_SECONDS`` only with a budget).
TRAINING = (TASK, MAX_ITERATIONS, NUM_ENVS, SEED, OUTPUT_URI, RUN_KEY)
