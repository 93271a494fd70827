"""The sim2real AWS CDK app: the AWS resources the ``sim_to_real`` DAG drives, and MWAA to run it.

Stacks (all environment-agnostic; names are fixed so the environment config can name them):

* :mod:`.network` — VPC (private subnets in two AZs), VPC endpoints, flow logs, the security groups
  of the Batch nodes (self-ingress for NCCL / torch rendezvous) and of the workstation.
* :mod:`.storage` — artifacts bucket, MWAA source bucket, access-log bucket, EFS for checkpoints.
* :mod:`.notifications` — SNS topic.
* :mod:`.images` — ECR repositories, CodeBuild project that builds ``containers/rl``.
* :mod:`.batch` — GPU compute environment, job queue, multinode job definition ``sim2real-train``.
* :mod:`.evaluation` — SSM document for the evaluation command, workstation role/profile, optional workstation.
* :mod:`.sagemaker` — model package group and pipeline execution role.
* :mod:`.greengrass` — thing group, component versions, token exchange role.
* :mod:`.mwaa` — the MWAA environment and its execution role.
* :mod:`.hyperpod` — optional SageMaker HyperPod (Slurm) cluster.
* :mod:`.environment` — the environment config JSON in SSM (``/sim2real/environment``).
"""
