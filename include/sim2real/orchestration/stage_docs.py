"""Markdown documentation of each stage of ``sim_to_real``, shown in the Airflow UI.

The DAG sets these as ``doc_md`` of each task group and of the stage's tasks (task details →
"Docs" in the UI). One short paragraph per stage: what it calls, what it waits for, what it
hands on (the README's stage table, in words). Plain strings: imported at DAG parse time.
"""

from __future__ import annotations

PREPARE_RUN = """\
**Prepare the run.** Reads the environment config (Airflow Variable `sim2real_environment`, written by
infra/), writes the run record `runs/<run_key>/run.json` and stops what earlier, dead runs left running
(the orphan sweep: Batch, Slurm, pipeline executions, Greengrass deployments; see `sim_to_real_sweeper`).
Waits for nothing. Checks the rules that span several form fields (for example `num_nodes > 1` on a
CPU MuJoCo task, deploying without the fine-tune, a training time budget longer than the stage timeout),
listing every broken rule at once, then estimates the run's GPU cost (on-demand price table × instance-hours)
and refuses to start above `max_budget_usd` — all before any spend. A scheduled (nightly) run takes the
environment config's `run_defaults` over the form's sandbox-sized defaults; a manual run keeps the form's values.
Hands on the run key, the cost estimate and every name and URI of the run (`runs/<run_key>/` in the
artifacts bucket, also as the "S3 run folder" extra link).
"""

CHECK_RESOURCES = """\
**Resource preflight.** Calls only read APIs: S3 `ListObjectsV2`, CodeBuild `BatchGetProjects`, ECR
`DescribeRepositories`, Batch `DescribeJobQueues` / `DescribeComputeEnvironments` / `DescribeJobDefinitions`,
EC2 `DescribeInstanceTypes`, IAM `GetRole`, SageMaker `DescribeModelPackageGroup` / `DescribeCluster`, IoT
`DescribeThingGroup` and Greengrass `ListCoreDevices` — for the stages this run uses. Waits for nothing: before
the build and any GPU, it refuses the run listing every problem at once (invalid or unreachable bucket,
disabled queue or compute environment, missing job definition, a job definition whose per-node GPUs / vCPUs /
memory exceed the instance type, missing pipeline role or model package group, a thing group without core
devices, a missing HyperPod cluster or group), each with the resource and what to change. Hands on what it checked.
"""

BUILD = """\
**Build the training image.** Calls CodeBuild, ECR and S3. Resolves the source version to a commit (a git branch or tag to the commit it
points at now; an S3 source to its object version), hashes the build context (CodeBuild `BatchGetProjects`:
buildspec, build environment, overrides) and keys the image on both. Reuses an image only when
`images/<repository>/<key>.json` in the artifacts bucket records its digest and ECR still has it (`DescribeImages`
by digest); otherwise CodeBuild `StartBuild` on that commit / `BatchGetBuilds` (`StopBuild` when the task is
killed). Waits (deferred) for the build to reach SUCCEEDED — not at all when it is already over.
Hands on the image URI pinned by **digest**, never a tag.
"""

TRAINING_BACKEND = """\
**Training backend.** Calls no AWS API: follows the form's `training_backend` — `batch` goes on with
`preflight.check_capacity` and the AWS Batch job, `hyperpod` with the `hyperpod` group (the other path is
skipped). Waits for nothing. Hands on the task id of the path taken.
"""

PREFLIGHT = """\
**Capacity preflight.** Calls EC2 `DescribeInstanceTypes`, Service Quotas `GetServiceQuota`, CloudWatch
`AWS/Usage` and Batch `DescribeComputeEnvironments` / `DescribeJobDefinitions`. Waits for nothing: it fails
fast, before any GPU is started, when one node of the job definition needs more GPUs, vCPUs or memory than
the instance type has (the job would stay RUNNABLE), when the quota cannot hold nodes × vCPUs (with the quota's name,
code, limit, usage and the command
to request more) or the compute environment is not usable. Hands on the verdict: needed / limit / in-use vCPU.
"""

TRAIN = """\
**Train the policy (AWS Batch, multi-node).** Calls Batch `RegisterJobDefinition` (a revision pinned to
the image digest), `ListJobs` (a retry reattaches to the job its earlier try started), `SubmitJob` with
`nodeOverrides`, `DescribeJobs`; `TerminateJob` when killed or when the job stays RUNNABLE past the
budget; CloudWatch Logs for progress. Waits (deferred) for SUCCEEDED; failures are classified and only
retryable classes are retried. Hands on the job id, its attempts and every node's log stream (extra links).
"""

HYPERPOD = """\
**Train the policy (SageMaker HyperPod, Slurm).** `check_capacity` calls SageMaker `DescribeCluster` /
`ListClusters` and Service Quotas (`<type> for cluster usage`) and fails before any spend when the quota
cannot hold the GPU group at `num_nodes`. `scale_up` (setup) calls `UpdateCluster` with every instance group
(only the GPU group's count changed); `wait_for_nodes` waits (deferred) until the group's nodes are Running
(`DescribeCluster`, `ListClusterNodes`). `train_policy` finds the cluster's head/login node by EC2 tag, sends
SSM `SendCommand` (`AWS-RunShellScript`) that writes the run's `train_rl.sbatch` and runs `sbatch --parsable`
under bash (unless `squeue` lists this run's job name as active, or `sacct` shows it COMPLETED: a retry
waits for or reports that job instead of paying for a second one; the script has `#SBATCH --time` from
`training_timeout_hours`), then waits (deferred) on the
job's state (`sacct`, else `scontrol show job`, each through SSM) until COMPLETED; FAILED, CANCELLED,
TIMEOUT, OUT_OF_MEMORY, NODE_FAIL fail with the cluster, job id, state, exit code and the end of the job's
log; `scancel` when killed. Every node runs the same launcher as the Batch job, so the trainer writes the same
checkpoints and `manifest.json`. `scale_down` (teardown) sets the GPU group back to `hyperpod.min_count` once
`scale_up` sent its request, whatever happened after (nodes that never came up, a failed or killed job);
a failed scale-down fails the run. Hands on the Slurm job id, its state, exit code and log path.
"""

TRAINING_JOB = """\
**Training job.** Calls no AWS API: runs after whichever backend trained (the other one is skipped) and
waits for nothing. Hands on `backend` and that backend's job: `batch_job_id`, or `slurm_job_id`,
`hyperpod_cluster_name` and `slurm_log_path`.
"""

CHECKPOINT = """\
**Wait for the checkpoint.** Runs after whichever backend trained (Batch or HyperPod). Calls S3
`HeadObject`/`GetObject` (or reads a mounted EFS path). Waits
(deferred) for `manifest.json`, which the trainer writes last. Hands on the manifest: checkpoint URI, its sha256
(re-verified against the object), iteration, timesteps and mean reward; emits the checkpoint asset event.
"""

EVALUATE = """\
**Closed-loop evaluation on the workstation.** Calls EC2 `DescribeInstances` (by tag) and `StartInstances`
if it is stopped; SSM `DescribeInstanceInformation`, `SendCommand` (`AWS-RunShellScript`, with the form's
execution timeout and output to S3), `GetCommandInvocation` (`CancelCommand` when killed). Waits (deferred)
for the command's Success on the workstation. Hands on `eval/report.json` (success rate, Wilson 95%
interval, seeds, checkpoint sha256), checked against this run's checkpoint. The teardown
`stop_workstation` calls EC2 `StopInstances` — only if this run started the instance.
"""

QUALITY_GATE = """\
**Quality gate.** Calls no AWS API: compares the evaluated success rate (or its 95% lower bound) with
`min_success_rate`. Waits for nothing. Hands on the verdict when it passes (the release goes on); when it
fails, the run stops here with the reason (a verdict, not an infrastructure failure) and a "gate failed"
SNS notification carries it.
"""

VLA = """\
**Fine-tune GR00T and wait for approval.** Calls SageMaker `DescribePipeline`, `CreatePipeline` /
`UpdatePipeline` (only when the definition changed), `ListPipelineExecutions` (reattach),
`StartPipelineExecution`, `DescribePipelineExecution`, `ListPipelineExecutionSteps`
(`StopPipelineExecution` when killed); then Model Registry `ListModelPackages` / `DescribeModelPackage`.
Waits (deferred) for the execution to Succeed (Failed / Stopped / CompletedWithFailures fail with the
failing step), then for this run's model package to be `Approved` (`Rejected` fails with the
reviewer's reason); an "approval needed" SNS notification names the package and how to approve it when
the wait starts. Hands on the execution ARN,
the model package ARN and its model data URI.
"""

DEPLOY = """\
**Deploy to the robots (AWS IoT Greengrass v2).** Calls IoT `DescribeThingGroup`, SageMaker
`DescribeModelPackage` (read again: a package no longer Approved is refused, nothing deployed), Greengrass
`ListCoreDevices` (a group without core devices is refused before any deployment), `CreateDeployment`
(configuration merge with the model URI, ROLLBACK on failure, rollout, abort and timeout config),
`ListEffectiveDeployments`; `CancelDeployment` on failure, timeout or kill. Waits (deferred) until every
core device of the thing group reports SUCCEEDED, at most the form's `deployment_timeout_minutes` (then
cancelled and failed without retry, naming each unfinished robot). Hands on the deployment id, each
device's status and the package's status at deploy time; a "deployed" SNS notification lists them.
"""

WRITE_LINEAGE = """\
**Write the lineage (the run's teardown).** Calls S3 `PutObject`. Runs whatever failed upstream (once
`prepare_run` succeeded, also when the run is marked failed) and waits for nothing; a lineage that cannot be
written fails the run. Hands on `runs/<run_key>/lineage.json` (checked against
`sim2real/contract/schemas/lineage.schema.json`) and `lineage.md`: image digest → Batch job → checkpoint sha256 →
success rate → pipeline execution → model package → deployment.
"""

RUN_OUTCOME = """\
**Run outcome (the last teardown).** Calls no AWS API: reads the state of every task of this run through
the Task Execution API. Waits for nothing; runs after the report whatever happened, also when the run was
marked failed from the UI or the API. Fails, naming each failed task, when any task failed or was
upstream-failed: the run's final state is this verdict (a report that succeeded never turns a failed run
into a success). Hands on the number of tasks it checked.
"""
