"""The HyperPod EKS training backend: the wait's step function (pure), and the hook, trigger, operators and orphan
sweep driven by the official Kubernetes client against an API server.

The API server is the sandbox's emulated one (:mod:`sim2real.dev.sandbox.kubernetes_api`, loopback, real sockets),
or a real cluster's when ``SIM2REAL_TEST_KUBECONFIG`` names a kubeconfig (README, "HyperPod on EKS"): then
``SIM2REAL_TEST_TEAM`` is a task-governance team whose queue has at least one GPU of quota and ``SIM2REAL_TEST_IMAGE``
an image with ``bash``; the tests that need the emulator's controls (a preemption on demand) are skipped.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk.exceptions import TaskDeferred

from sim2real.contract.hyperpod_eks import eks_token_url
from sim2real.orchestration.hooks import hyperpod_eks as eks
from sim2real.orchestration.waits.core import WaitState, drive
from sim2real.orchestration.waits.hyperpod_eks import eks_job_step, job_response

PARAMS = {"cluster_name": "hp", "namespace": "hyperpod-ns-t", "job_name": "s2r-k", "job_uid": "u", "num_nodes": 2,
          "usd_per_node_hour": 36.0, "cost_limit_usd": None}


def _job(*conditions: str, suspend: bool = False) -> dict:
    return {"metadata": {"name": "s2r-k", "uid": "u"}, "spec": {"runPolicy": {"suspend": suspend}},
            "status": {"conditions": [{"type": c, "status": "True", "reason": f"{c}Reason", "message": f"{c} msg"}
                                      for c in conditions]}}


T0 = 1_800_000_000.0  # epoch s of the tests' clock


def _stamp(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(T0 + t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _evicted(past: int = 0) -> dict:
    return {"status": {"accumulatedPastExexcutionTimeSeconds": past,
                       "conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted",
                                       "message": "Preempted to accommodate a higher priority Workload"}]}}


def _admitted(since: float, past: int | None = None, finished: float | None = None) -> dict:
    """A Workload admitted at ``since`` (test seconds) after ``past`` admitted seconds (Kueue v1beta1's field)."""
    conditions = [{"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": _stamp(since)}]
    if finished is not None:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                           "lastTransitionTime": _stamp(finished)})
    status = {"conditions": conditions}
    if past is not None:
        status["accumulatedPastExexcutionTimeSeconds"] = past
    return {"status": status}


def _steps(responses, params=PARAMS, poll=10.0):
    state, steps = WaitState(params=params, poll_interval_s=poll), []
    for now, response in responses:
        from dataclasses import replace

        state = replace(state, now=T0 + now)
        step = eks_job_step(response, state)
        steps.append(step)
        state = state.after(step)
    return steps


# ---- the step function (pure)

def test_a_preemption_is_waited_through_and_only_gpu_held_time_counts():
    steps = _steps([
        (0, job_response(_job("Created", suspend=True), {"status": {}})),            # queued
        (10, job_response(_job("Created", "Running"), _admitted(10))),               # admitted and running
        (20, job_response(_job("Created", "Running"), _admitted(10))),               # +10 s held
        (30, job_response(_job("Created", suspend=True), _evicted(20))),             # preempted: 20 s admitted
        (130, job_response(_job("Created", suspend=True), _evicted(20))),            # 100 s queued: not counted
        (140, job_response(_job("Created", "Running"), _admitted(140, 20))),         # readmitted
        (150, job_response(_job("Created", "Succeeded"), _admitted(140, 20, 150))),  # +10 s
        (999, job_response(_job("Created", "Succeeded"), _admitted(140, 20, 150))),  # read again much later
    ])
    assert [s.outcome for s in steps[:-1]] == ["retry"] * 6 + ["success"]
    assert steps[3].payload["state"] == "Preempted" and "not a failure" in steps[3].reason
    assert steps[-2].payload["preemptions"] == 1
    assert steps[-2].payload["gpu_seconds"] == 30.0  # 10 + 10 + 10, not the 150 s the wait took
    assert steps[-2].payload["cost_usd"] == pytest.approx(30 / 3600 * 2 * 36.0, abs=1e-4)
    assert steps[-1].payload["gpu_seconds"] == 30.0  # the Finished condition ends the count


def test_the_gpu_time_is_read_from_the_cluster_so_a_restarted_wait_keeps_it():
    """A retry, a reattach or a restarted triggerer starts with empty memory: Kueue's Workload still says the job
    was admitted 3000 s before its last eviction and has been admitted again for 600 s."""
    [step] = _steps([(1000, job_response(_job("Created", "Running"), _admitted(400, past=3000)))])
    assert step.payload["gpu_seconds"] == 3600.0
    assert step.payload["cost_usd"] == pytest.approx(3600 / 3600 * 2 * 36.0, abs=1e-4)
    v1beta2 = {"status": {**_admitted(400)["status"], "accumulatedPastExecutionTimeSeconds": 3000}}
    assert _steps([(1000, job_response(_job("Running"), v1beta2))])[0].payload["gpu_seconds"] == 3600.0


def test_failed_deleted_and_api_errors():
    failed = _steps([(0, job_response(_job("Created", "Failed"), None))])[0]
    assert failed.outcome == "failure" and "FailedReason: Failed msg" in failed.reason
    gone = _steps([(0, job_response(None, None))])[0]
    assert gone.outcome == "failure" and gone.payload["state"] == "Deleted" and "gone" in gone.reason
    throttled = _steps([(0, {"Error": {"Code": "TooManyRequestsException", "Message": "slow down"}})])[0]
    assert throttled.outcome == "retry"
    forbidden = _steps([(0, {"Error": {"Code": "403", "Message": "Forbidden"}})])[0]
    assert forbidden.outcome == "failure" and "403" in forbidden.reason


@pytest.mark.parametrize("workload", [
    {"metadata": {"name": "wl-1"}, "spec": {"active": False}, "status": {}},
    {"metadata": {"name": "wl-1"}, "status": {"conditions": [{"type": "Evicted", "status": "True",
                                                               "reason": "InactiveWorkload", "message": "off"}]}},
    {"metadata": {"name": "wl-1"}, "status": {"conditions": [{"type": "Evicted", "status": "True", "reason":
                                                               "DeactivatedDueToMaximumExecutionTimeExceeded"}]}},
])
def test_a_deactivated_workload_fails_the_wait_instead_of_waiting_for_readmission(workload):
    [step] = _steps([(0, job_response(_job("Created", suspend=True), workload))])
    assert step.outcome == "failure" and step.payload["state"] == "Failed"
    assert "Kueue Workload wl-1 is deactivated" in step.reason


def test_a_suspended_job_without_a_workload_fails_after_a_bounded_time():
    job = {**_job("Created", suspend=True), "metadata": {"name": "s2r-k", "uid": "u", "creationTimestamp": _stamp(0),
                                                         "labels": {eks.PRIORITY_LABEL: "gold-priority"}}}
    early, late = _steps([(60, job_response(job, None)), (301, job_response(job, None))])
    assert early.outcome == "retry"
    assert late.outcome == "failure" and late.payload["state"] == "NoWorkload"
    assert "WorkloadPriorityClass 'gold-priority' does not exist" in late.reason


@pytest.mark.parametrize(("code", "status", "outcome"), [
    ("ThrottlingException", 400, "retry"), ("InternalFailure", 500, "retry"), ("SomethingBroke", 503, "retry"),
    ("AccessDeniedException", 403, "failure"), ("ResourceNotFound", 404, "failure"),
    ("ValidationException", 400, "failure"),
])
def test_aws_errors_building_the_client_retry_only_when_transient(monkeypatch, code, status, outcome):
    """SageMaker / EKS DescribeCluster answer through the trigger's read (botocore Stubber on a real client)."""
    import boto3
    from botocore.stub import Stubber

    from sim2real.orchestration.triggers.hyperpod_eks import HyperPodEksJobTrigger

    sagemaker = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
    stub = Stubber(sagemaker)
    stub.add_client_error("describe_cluster", service_error_code=code, service_message=f"{code} says no",
                          http_status_code=status)
    monkeypatch.setattr(eks.HyperPodEksHook, "conn", property(lambda self: sagemaker))
    trigger = HyperPodEksJobTrigger(cluster_name="hp", namespace="hyperpod-ns-t", job_name="s2r-k")
    with stub:
        [step] = _steps([(0, trigger._read())])
    assert step.outcome == outcome, step.reason
    if outcome == "failure":
        assert code in step.reason and f"{code} says no" in step.reason


def test_a_cluster_that_is_not_eks_orchestrated_fails_the_wait(monkeypatch):
    from sim2real.orchestration.triggers.hyperpod_eks import HyperPodEksJobTrigger

    def slurm(self, name):
        return eks.eks_cluster_name_of({"ClusterName": name, "Orchestrator": {}})

    monkeypatch.setattr(eks.HyperPodEksHook, "api_client", slurm)
    [step] = _steps([(0, HyperPodEksJobTrigger(cluster_name="hp", namespace="n", job_name="j")._read())])
    assert step.outcome == "failure" and "orchestrated by Slurm" in step.reason


def test_the_cost_limit_deletes_the_job_before_it_passes():
    params = {**PARAMS, "cost_limit_usd": 0.3}  # 2 nodes x $36/h = $0.02/s: the limit is 15 s of GPU time
    steps = _steps([(0, job_response(_job("Running"), _admitted(0))), (10, job_response(_job("Running"), _admitted(0)))],
                   params)
    assert steps[0].outcome == "retry"
    assert steps[1].outcome == "failure" and steps[1].payload["reason"] == "cost_limit"
    assert steps[1].action.name == "delete_job" and steps[1].action.params == {"namespace": "hyperpod-ns-t",
                                                                                "job_name": "s2r-k"}


def test_the_job_carries_the_task_governance_labels_and_a_try_independent_name():
    key = "sim-to-real-manual-2026-12-04t16-58-54-044674-00-00-7855b4e7"
    name = eks.job_name(key)
    assert name == eks.job_name(key) and len(name) <= 63 and name.endswith("7855b4e7")
    manifest = eks.job_manifest(name=name, namespace="hyperpod-ns-robots", team="robots", priority_class="training",
                                run_key=key, image="img@sha256:x", num_nodes=3, gpus_per_node=8,
                                environment={"TASK": "Reacher-v5"}, command=["bash", "run.bash"])
    labels = manifest["metadata"]["labels"]
    assert labels[eks.QUEUE_LABEL] == "hyperpod-ns-robots-localqueue"
    assert labels[eks.PRIORITY_LABEL] == "training-priority" and labels[eks.RUN_KEY_LABEL] == key
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    assert manifest["spec"]["runPolicy"]["suspend"] is True  # Kueue admits it
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    assert specs["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    # the operator's PET_NPROC_PER_NODE / WORLD_SIZE and MASTER_PORT come from these (training-operator v1.9.0)
    assert manifest["spec"]["nprocPerNode"] == "8"
    for spec in specs.values():
        assert spec["template"]["spec"]["containers"][0]["ports"] == [{"name": "pytorchjob-port",
                                                                      "containerPort": 23456}]


def test_the_actual_cost_counts_the_gpu_held_seconds():
    from sim2real.orchestration.cost_actual import actual_run_cost

    plan = {"budget": {"items": [{"stage": "training", "instance_type": "ml.g5.12xlarge", "instances": 2,
                                  "usd_per_hour": 36.0}]}, "batch": {"num_nodes": 2}}
    result = {"backend": "hyperpod_eks", "job_id": "s2r-k", "cluster_name": "hp", "namespace": "hyperpod-ns-t",
              "job_name": "s2r-k", "gpu_seconds": 1800.0, "num_nodes": 2, "preemptions": 1}
    item = next(i for i in actual_run_cost(plan, result, now=10_000.0)["items"] if i["stage"] == "training")
    assert item["hours"] == pytest.approx(0.5) and item["usd"] == pytest.approx(36.0)
    assert "PyTorchJob hyperpod-ns-t/s2r-k on HyperPod EKS cluster hp" in item["basis"]


def test_the_form_refuses_hyperpod_eks_without_a_cluster_or_team():
    from sim2real.orchestration.stages.hyperpod_eks import rule_errors

    errors = rule_errors({"training_backend": "hyperpod_eks"}, {})
    assert any("needs a cluster" in e for e in errors) and any("task-governance team" in e for e in errors)
    # the team (or cluster) only in the form: the orphan sweep and infra's IAM / RBAC know the config's alone
    errors = rule_errors({"training_backend": "hyperpod_eks", "hyperpod_eks_team": "robots"},
                         {"hyperpod_eks": {"cluster_name": "hp"}})
    assert len(errors) == 1 and "hyperpod_eks.team" in errors[0] and "orphan sweep" in errors[0], errors
    env = {"hyperpod_eks": {"cluster_name": "hp", "team": "robots"}}
    assert rule_errors({"training_backend": "hyperpod_eks"}, env) == []
    assert rule_errors({"training_backend": "hyperpod_eks", "hyperpod_eks_team": "robots",
                        "hyperpod_eks_cluster_name": "hp"}, env) == []
    assert rule_errors({"training_backend": "batch"}, {}) == []


def test_the_form_refuses_a_cluster_or_team_other_than_the_configured_one():
    """A job in another team's namespace (or on another cluster) would be outside what the orphan sweep lists and
    what infra/ grants (the access entry and RBAC of the configured cluster and namespace): refused with the reason,
    not silently replaced by the config's."""
    from sim2real.orchestration.stages.hyperpod_eks import rule_errors

    env = {"hyperpod_eks": {"cluster_name": "hp", "team": "robots"}}
    errors = rule_errors({"training_backend": "hyperpod_eks", "hyperpod_eks_team": "vision"}, env)
    assert len(errors) == 1 and "'vision'" in errors[0] and "'robots'" in errors[0], errors
    errors = rule_errors({"training_backend": "hyperpod_eks", "hyperpod_eks_cluster_name": "other"}, env)
    assert len(errors) == 1 and "'other'" in errors[0] and "'hp'" in errors[0], errors


# ---- against an API server (the emulated one, or SIM2REAL_TEST_KUBECONFIG's)

class _Ti:
    def __init__(self):
        self.xcoms = {}
        self.try_number, self.max_tries = None, None

    def xcom_push(self, key, value):
        self.xcoms[key] = value


@pytest.fixture
def cluster(monkeypatch):
    """``(api, team, command, emulator or None)``; the operators' hook answers with ``api``."""
    from kubernetes import config as kube_config

    path = os.environ.get("SIM2REAL_TEST_KUBECONFIG")
    if path:
        api = kube_config.new_client_from_config(config_file=path)
        team, emulator = os.environ["SIM2REAL_TEST_TEAM"], None
        yield_value = (api, team, ["bash", "-c", "echo training; sleep 20; echo done"], None)
        monkeypatch.setattr(eks.HyperPodEksHook, "api_client", lambda self, name: api)
        yield yield_value
        for job in eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}", eks.team_namespace(team)):
            eks.delete_job(api, job["metadata"]["namespace"], job["metadata"]["name"])
        return
    from sim2real.dev.sandbox.kubernetes_api import KubernetesApiServer

    with KubernetesApiServer(step_seconds=0.05) as emulator:
        emulator.add_team("robots", gpu_quota=4)
        emulator.add_priority_class("training-priority")
        api = kube_config.new_client_from_config_dict(emulator.kubeconfig())
        monkeypatch.setattr(eks.HyperPodEksHook, "api_client", lambda self, name: api)
        yield api, "robots", ["bash", "-c", "echo training; sleep 1; echo done"], emulator


def _operator(team, command, key, **kwargs):
    from sim2real.orchestration.operators.hyperpod_eks import HyperPodEksJobOperator

    kwargs.setdefault("priority_class", "training")
    return HyperPodEksJobOperator(task_id="train_policy", cluster_name="hp", team=team, run_key=key,
                                  image=os.environ.get("SIM2REAL_TEST_IMAGE", "local"), num_nodes=1,
                                  gpus_per_node=1, environment={"TASK": "Reacher-v5"}, command=command,
                                  poll_interval=1, **kwargs)


def _submit(team, command, key, **kwargs):
    """``execute`` one try; its deferral's trigger (the job created or reattached to)."""
    ti = _Ti()
    with pytest.raises(TaskDeferred) as deferred:
        _operator(team, command, key, **kwargs).execute({"ti": ti})
    return deferred.value, ti


def _wait(api, trigger, max_attempts=300, **params):
    trigger._api = api
    state = WaitState(params={**trigger.step_params(), **params}, poll_interval_s=0.1)
    return asyncio.run(drive(eks_job_step, lambda s: trigger.describe(None, s), state, max_attempts=max_attempts,
                             perform=lambda action: trigger.perform(None, action)))


def _key() -> str:
    return f"test-eks-{uuid.uuid4().hex[:8]}"


@pytest.mark.integration
def test_capacity_is_refused_before_submit(cluster):
    from sim2real.orchestration.operators.hyperpod_eks import HyperPodEksCapacityOperator

    api, team, _, _ = cluster
    ok = HyperPodEksCapacityOperator(task_id="c", cluster_name="hp", team=team, num_nodes=1, gpus_per_node=1)
    assert ok.execute({})["ok"] is True
    with pytest.raises(AirflowFailException, match="LocalQueue hyperpod-ns-nobody/hyperpod-ns-nobody-localqueue "
                                                   "does not exist"):
        HyperPodEksCapacityOperator(task_id="c", cluster_name="hp", team="nobody", num_nodes=1,
                                    gpus_per_node=1).execute({})
    with pytest.raises(AirflowFailException, match="WorkloadPriorityClass nope-priority does not exist"):
        HyperPodEksCapacityOperator(task_id="c", cluster_name="hp", team=team, num_nodes=1, gpus_per_node=1,
                                    priority_class="nope").execute({})
    assert HyperPodEksCapacityOperator(task_id="c", cluster_name="hp", team=team, num_nodes=1, gpus_per_node=1,
                                       priority_class="training").execute({})["ok"] is True
    with pytest.raises(AirflowFailException, match=r"nominal quota of \d+ nvidia.com/gpu; the job needs 4096"):
        HyperPodEksCapacityOperator(task_id="c", cluster_name="hp", team=team, num_nodes=16,
                                    gpus_per_node=256).execute({})
    assert eks.list_jobs(api, eks.RUN_KEY_LABEL, eks.team_namespace(team)) == []  # nothing was submitted


@pytest.mark.integration
def test_a_retry_reattaches_by_name_and_the_preempted_job_resumes(cluster):
    api, team, command, emulator = cluster
    if emulator is None:
        pytest.skip("a preemption on demand needs the emulated API server")
    emulator.faults.update(preempt_after_seconds=0.3, preempt_hold_seconds=0.5)
    key = _key()
    first, ti = _submit(team, command, key)
    assert first.kwargs == {"reattached": False} and ti.xcoms["eks_job"]["job_name"] == eks.job_name(key)
    # The worker dies after the job was created; the retry finds it by name instead of creating a second one.
    second, _ = _submit(team, command, key)
    assert second.kwargs == {"reattached": True}
    assert len(eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}={key}")) == 1
    event = _wait(api, second.trigger)
    assert event["status"] == "success" and event["state"] == "Succeeded", event
    assert event["preemptions"] == 1 and 0 < event["gpu_seconds"]
    result = _operator(team, command, key).execute_complete({"ti": _Ti()}, event, reattached=True)
    assert result["job_uid"] and result["preemptions"] == 1 and result["reattached"] is True


def _until(predicate, seconds=20.0):
    import time

    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.integration
def test_an_evicted_workload_keeps_its_admitted_seconds_in_its_status(cluster):
    """Kueue adds an admission's seconds to ``accumulatedPastExexcutionTimeSeconds`` when it evicts the Workload."""
    import time

    from sim2real.orchestration.waits.hyperpod_eks import true_conditions

    api, team, _, emulator = cluster
    if emulator is None:
        pytest.skip("a preemption on demand needs the emulated API server")
    deferred, _ = _submit(team, ["bash", "-c", "sleep 60"], _key())
    ns, name, uid = deferred.trigger.namespace, deferred.trigger.job_name, deferred.trigger.job_uid
    _until(lambda: "Running" in true_conditions(eks.read_job(api, ns, name)))
    time.sleep(2.1)
    emulator.faults.update(preempt_hold_seconds=60)  # not readmitted while this test reads the Workload
    emulator.preempt(ns, name)
    workload = eks.workload_of(api, ns, uid)
    assert "Admitted" not in true_conditions(workload)
    assert workload["status"]["accumulatedPastExexcutionTimeSeconds"] >= 2
    eks.delete_job(api, ns, name)


@pytest.mark.integration
def test_a_job_kueue_makes_no_workload_for_fails_the_wait_naming_the_priority_class(cluster):
    api, team, command, emulator = cluster
    if emulator is None:
        pytest.skip("submits a job with a priority class that does not exist")
    deferred, _ = _submit(team, command, _key(), priority_class="nope")
    assert eks.workload_of(api, deferred.trigger.namespace, deferred.trigger.job_uid) is None
    event = _wait(api, deferred.trigger, no_workload_fail_s=1.0)
    assert event["status"] == "failure" and event["state"] == "NoWorkload", event
    assert "WorkloadPriorityClass 'nope-priority' does not exist" in event["message"]


@pytest.mark.integration
def test_a_cleared_task_starts_afresh_and_deletes_the_active_job_of_its_earlier_try(cluster):
    api, team, command, _ = cluster
    long_run = [*command[:-1], command[-1].replace("sleep 1", "sleep 60")]
    key = _key()
    ti = _Ti()
    ti.try_number, ti.max_tries = 1, 2  # first series, retries=2
    with pytest.raises(TaskDeferred):
        _operator(team, long_run, key, retries=2).execute({"ti": ti})
    ti.try_number, ti.max_tries = 2, 3  # cleared after try 1: max_tries = 1 + retries, the next try is 2
    with pytest.raises(TaskDeferred) as deferred:
        _operator(team, long_run, key, retries=2).execute({"ti": ti})
    assert deferred.value.kwargs == {"reattached": False}
    assert deferred.value.trigger.job_name == eks.job_name(key, "s2")
    names = [j["metadata"]["name"] for j in eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}={key}")]
    assert names == [eks.job_name(key, "s2")]  # the first try's job was deleted
    ti.try_number = 3  # a retry within the cleared series reattaches to its job
    with pytest.raises(TaskDeferred) as again:
        _operator(team, long_run, key, retries=2).execute({"ti": ti})
    assert again.value.kwargs == {"reattached": True} and again.value.trigger.job_name == eks.job_name(key, "s2")


@pytest.mark.integration
def test_kill_deletes_the_job_and_the_sweeper_stops_an_orphan(cluster):
    from sim2real.orchestration import sweeper
    from sim2real.orchestration.orphans import find_eks_jobs

    api, team, command, _ = cluster
    long_run = [*command[:-1], command[-1].replace("sleep 1", "sleep 60")]
    killed, _ = _submit(team, long_run, _key())
    killed.trigger._api = api
    asyncio.run(killed.trigger.stop_resource())  # what the trigger's on_kill does once the task is stopped
    assert eks.read_job(api, killed.trigger.namespace, killed.trigger.job_name) is None
    orphan_key = _key()
    _submit(team, long_run, orphan_key)
    [found] = [f for f in find_eks_jobs(api, "hp", eks.team_namespace(team)) if f.run_key == orphan_key]
    assert found.kind == "eks_job" and found.id == f"{eks.team_namespace(team)}/{eks.job_name(orphan_key)}"
    assert sweeper.stop(found, {"eks_api": lambda name: api}, "its run is over") == "DeletePyTorchJob"
    assert eks.read_job(api, eks.team_namespace(team), found.name) is None


@pytest.mark.integration
def test_a_failed_job_names_cluster_namespace_job_condition_and_log_tail(cluster):
    api, team, command, _ = cluster
    failing = ["bash", "-c", "echo loss exploded at step 7; exit 3"]
    key = _key()
    deferred, _ = _submit(team, failing, key)
    event = _wait(api, deferred.trigger)
    assert event["status"] == "failure" and event["state"] == "Failed", event
    with pytest.raises(AirflowFailException) as raised:
        _operator(team, failing, key).execute_complete({"ti": _Ti()}, event)
    text = str(raised.value)
    for part in ("cluster hp", f"namespace {eks.team_namespace(team)}", f"job {eks.job_name(key)}", "condition Failed",
                 "loss exploded at step 7"):
        assert part in text, (part, text)
    gone = {**event, "state": "Deleted", "status": "failure"}
    with pytest.raises(AirflowException) as retried:  # vanished: a retry creates it again
        _operator(team, failing, key).execute_complete({"ti": _Ti()}, gone)
    assert not isinstance(retried.value, AirflowFailException)


@pytest.mark.integration
def test_the_api_server_wants_a_bearer_token(cluster):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api, team, _, _ = cluster
    anonymous = client.Configuration()
    anonymous.host = api.configuration.host
    anonymous.ssl_ca_cert = api.configuration.ssl_ca_cert
    with pytest.raises(ApiException) as refused:
        eks.read_job(client.ApiClient(anonymous), eks.team_namespace(team), "x")
    assert refused.value.status in (401, 403)


# ---- a sweep: one PyTorchJob per candidate

def _sweep_plan(**over) -> dict:
    from sim2real.orchestration.stages.run import plan_run

    from tests.orchestration.stages.test_stages import PARAMS
    from tests.orchestration.test_config import GOOD

    params = {**PARAMS, "training_backend": "hyperpod_eks", "hyperpod_eks_team": "robots",
              "sweep": {"seed": [3, 4, 5]}, "sweep_max_parallel": 2, **over}
    env = {**GOOD, "hyperpod_eks": {"cluster_name": "hp", "team": "robots", "instance_type": "ml.g5.12xlarge"}}
    return plan_run(dag_id="sim_to_real", run_id="manual__2026-12-04T00:00:00+00:00", params=params, env=env)


def test_a_sweep_is_planned_on_eks_with_the_capacity_of_the_candidates_that_run_at_once():
    planned = _sweep_plan
    swept, single = planned(), planned(sweep=None)
    assert swept["hyperpod_eks"]["sweep"] is True and swept["sweep"]["enabled"] is True
    assert swept["hyperpod_eks"]["capacity_nodes"] == 2  # min(2 at once, 3 candidates) x 1 node
    assert single["hyperpod_eks"]["sweep"] is False and single["hyperpod_eks"]["capacity_nodes"] == 1



def test_pick_best_and_the_lineage_name_each_candidates_pytorchjob_a_failed_one_too():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors
    from sim2real.orchestration.stages.sweep import _candidate_failures, pick_best_result

    from tests.orchestration.stages.test_sweep_hyperpod import CandidateTI, _report

    plan = _sweep_plan()
    jobs = [{"cluster_name": "hp", "namespace": "hyperpod-ns-robots", "job_name": f"s2r-k-c{i}", "job_uid": f"u{i}"}
            for i in range(3)]
    trainings = [{"backend": "hyperpod_eks", "job_id": j["job_name"], **j, "state": "Succeeded"} for j in jobs]
    trainings[2] = None  # its train_on_eks failed: no return value
    manifests = [{"checkpoint_uri": f"{c['output_uri']}policy.pt", "sha256": f"{i:x}" * 64}
                 for i, c in enumerate(plan["sweep"]["candidates"])]
    manifests[2] = None
    states = {"sweep.train_on_eks_0": "success", "sweep.train_on_eks_1": "success", "sweep.train_on_eks_2": "failed"}
    ti = CandidateTI(states, {("eks_job", 2): jobs[2]})
    failures = _candidate_failures(ti, [0, 1, 2], lambda task_id: [None] * 3, batch=False, eks=True)
    assert ("sweep.train_on_eks", "eks_job", 2) in ti.pulls and not any(p[0] == "sweep.train_on_slurm" for p in ti.pulls)
    picked = pick_best_result(plan, trainings, manifests, [_report(12), _report(18), None], failures)
    rows = picked["candidates"]
    assert [r["eks_job"] for r in rows] == [{k: j[k] for k in ("namespace", "job_name", "job_uid")} for j in jobs]
    assert all(r["batch_job_id"] is None and r["hyperpod_cluster_name"] == "hp" for r in rows)
    assert rows[2]["state"] == "failed" and picked["winner"] == 1
    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, sweep=picked, training=picked["training"],
                            evaluation={**_report(18), "checkpoint_sha256": manifests[1]["sha256"]})
    assert lineage_errors(lineage) == [] and lineage["candidates"][2]["eks_job"]["job_name"] == "s2r-k-c2"
    assert lineage["chain"]["eks_job"] == rows[1]["eks_job"]


@pytest.mark.integration
def test_each_candidate_runs_its_own_job_reattached_by_name_and_deleted_on_kill(cluster):
    from sim2real.orchestration.orphans import find_eks_jobs

    api, team, command, _ = cluster
    long_run = [*command[:-1], command[-1].replace("sleep 1", "sleep 60")]
    key, namespace = _key(), eks.team_namespace(team)

    def candidate(cid, ti=None):
        operator = _operator(team, long_run, key, candidate=cid, retries=2)
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute({"ti": ti or _Ti()})
        return operator, deferred.value

    _, first = candidate("c0")
    operator, second = candidate("c1")
    assert (first.trigger.job_name, second.trigger.job_name) == (eks.job_name(key, "c0"), eks.job_name(key, "c1"))
    jobs = {j["metadata"]["name"]: j["metadata"]["labels"] for j in eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}={key}")}
    assert sorted(jobs) == [eks.job_name(key, "c0"), eks.job_name(key, "c1")]
    for name, labels in jobs.items():  # each in the team's queue, with the run's priority class and its candidate
        assert labels[eks.QUEUE_LABEL] == eks.team_local_queue(team) and labels[eks.RUN_KEY_LABEL] == key
        assert labels[eks.PRIORITY_LABEL] == "training-priority" and name.endswith(labels[eks.CANDIDATE_LABEL])
    # A retry of c1 reattaches to c1's job by name; a cleared c0 starts afresh and deletes only c0's earlier job.
    _, again = candidate("c1")
    assert again.kwargs == {"reattached": True} and again.trigger.job_name == eks.job_name(key, "c1")
    cleared = _Ti()
    cleared.try_number, cleared.max_tries = 2, 3
    _, fresh = candidate("c0", cleared)
    assert fresh.trigger.job_name == eks.job_name(key, "c0-s2")
    names = sorted(j["metadata"]["name"] for j in eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}={key}"))
    assert names == [eks.job_name(key, "c0-s2"), eks.job_name(key, "c1")]
    # The orphan sweep finds every candidate's job by its run key; a kill deletes only the killed candidate's job.
    assert {f.name for f in find_eks_jobs(api, "hp", namespace) if f.run_key == key} == set(names)
    operator.on_kill()
    assert eks.read_job(api, namespace, eks.job_name(key, "c1")) is None
    assert eks.read_job(api, namespace, eks.job_name(key, "c0-s2")) is not None


def test_the_emulated_api_server_runs_nothing_for_a_forged_eks_token(monkeypatch):
    """Only an EKS token signed with the server's own credentials for its cluster is accepted: one of the right shape
    signed with another secret key, or for another cluster, or expired, is answered 401."""
    import time

    import boto3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from sim2real.dev.sandbox.kubernetes_api import KubernetesApiServer, verify_eks_token

    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:1")

    def token(secret: str, cluster: str = "c") -> str:
        session = boto3.session.Session(aws_access_key_id="AKIDSANDBOX", aws_secret_access_key=secret,
                                        region_name="us-east-1")
        return eks.eks_token(session, cluster)

    with KubernetesApiServer(credentials={"AKIDSANDBOX": "own-secret"}, eks_cluster_name="c") as server:
        def read(bearer: str):
            config = client.Configuration()
            config.host, config.api_key, config.api_key_prefix = server.url, {"BearerToken": bearer}, {
                "BearerToken": "Bearer"}
            return eks.read_job(client.ApiClient(config), "ns", "j")

        assert read(token("own-secret")) is None  # authenticated: the job is just not there
        for forged in (token("testing"), token("own-secret", cluster="other")):
            assert eks_token_url(forged) is not None  # the right shape
            with pytest.raises(ApiException) as refused:
                read(forged)
            assert refused.value.status == 401
    assert not verify_eks_token(token("own-secret"), {"AKIDSANDBOX": "own-secret"}, "c", now=time.time() + 3600)


def test_the_ca_bundle_is_one_file_per_ca_however_often_a_client_is_built(monkeypatch, tmp_path):
    import base64
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    monkeypatch.setattr(eks.HyperPodEksHook, "eks_cluster", lambda self, name: {
        "name": "c", "endpoint": "https://x.eks.amazonaws.com", "ca_data": base64.b64encode(pem).decode()})
    for name, value in (("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(eks, "eks_token", lambda session, name: "k8s-aws-v1.x")
    hook = eks.HyperPodEksHook(aws_conn_id=None, region_name="us-east-1")
    paths = {hook.api_client("hp").configuration.ssl_ca_cert for _ in range(5)}
    assert len(paths) == 1 and sorted(p.name for p in tmp_path.iterdir()) == [paths.pop().rsplit("/", 1)[1]]
    assert next(tmp_path.iterdir()).read_bytes() == pem
