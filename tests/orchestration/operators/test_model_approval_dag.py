"""The approval step under a real Airflow (``dag.test()``, SQLite) against moto's model registry.

One subprocess (a fresh ``AIRFLOW_HOME`` and metadata database; Airflow reads its config at import) runs a
one-task DAG with :class:`~sim2real.orchestration.operators.model_approval.ModelPackageApprovalOperator`
three times. A reviewer thread waits for the task's human-in-the-loop request in Airflow's database, then
decides in the registry (UpdateModelPackage, as SageMaker Studio or the CLI would), or does nothing (the
timeout). ``dag.test()`` runs the trigger in-process, where the Task Execution API's human-in-the-loop read
and write are not served (the triggerer serves them), so an answer given in Airflow and the closing of the
request are covered by the operator's tests (the event Airflow's API resumes the task with, the trigger's
requests) and by the browser test (the real API server and triggerer).
"""

from __future__ import annotations

import json

import pytest

from tests.fresh_process import drive_fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # integration: dag.test() on an Airflow metadata DB


DAG_FILE = """
import datetime as dt

from airflow.sdk import DAG

from sim2real.orchestration.operators.model_approval import ModelPackageApprovalOperator

with DAG("approval_step", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False):
    ModelPackageApprovalOperator(task_id="wait_for_approval", model_package_group_name="{group}",
                                 run_key="{{{{ dag_run.conf['run_key'] }}}}", poke_interval=1,
                                 response_timeout=dt.timedelta(seconds=6))
"""


def drive(home: str, out: str) -> None:
    """Subprocess body: moto, the Airflow home, four runs; writes what the tests check to ``out``."""
    import os
    import threading
    import time
    from pathlib import Path

    from moto.server import ThreadedMotoServer

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps({"conn_type": "aws", "login": "testing", "password": "testing",
                                                         "extra": {"region_name": "us-east-1", "endpoint_url": endpoint}})
    from sim2real.dev.demo import prepare_airflow_home

    # dag.test() runs a DAG of the DAGs folder's bundle (it must be serialized): the one-task DAG of the step.
    group = "groot-approval"
    dag_file = Path(home) / "dags" / "approval_step.py"
    dag_file.parent.mkdir(parents=True, exist_ok=True)
    dag_file.write_text(DAG_FILE.format(group=group))
    prepare_airflow_home(Path(home), {"AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)})


    import airflow.models.dagrun  # noqa: F401 - imported here, before the reviewer thread starts: two threads
    # importing Airflow's models at once deadlock
    import airflow.serialization.serialized_objects  # noqa: F401
    import boto3
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.session import create_session
    from sqlalchemy import select

    sm = boto3.client("sagemaker", region_name="us-east-1", endpoint_url=endpoint)
    sm.create_model_package_group(ModelPackageGroupName=group)
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags["approval_step"]

    answered: set = set()  # the runs go one after another: the new request is the one not seen before

    def new_request(timeout: float = 240) -> HITLDetail | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with create_session() as session:
                rows = session.scalars(select(HITLDetail).join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
                                       .where(TaskInstance.dag_id == dag.dag_id)).all()
                fresh = [row for row in rows if row.ti_id not in answered]
                if fresh:
                    answered.add(fresh[0].ti_id)
                    return fresh[0]
            time.sleep(0.2)
        return None

    def reviewer(arn: str, act: str, seen: dict) -> None:
        request = new_request()
        seen["request"] = {"subject": request.subject, "body": request.body, "options": request.options,
                           "params": sorted(request.params)} if request else None
        if request is None or act == "nothing":
            return
        status = "Approved" if act == "approve" else "Rejected"
        sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status,
                                ApprovalDescription=f"{status.lower()} in Studio by carol")

    with create_session() as session:  # the query's imports, in this thread too
        session.scalars(select(HITLDetail).join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)).all()
    result = {}
    for case in ("approve", "reject", "nothing"):
        run_key = f"run-{case}"
        arn = sm.create_model_package(
            ModelPackageGroupName=group, ModelApprovalStatus="PendingManualApproval",
            CustomerMetadataProperties={"sim2real:run-key": run_key},
            InferenceSpecification={"Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/g:1",
                                                    "ModelDataUrl": f"s3://b/runs/{run_key}/vla/model.tar.gz"}],
                                    "SupportedContentTypes": ["application/json"],
                                    "SupportedResponseMIMETypes": ["application/json"]})["ModelPackageArn"]
        seen: dict = {}
        thread = threading.Thread(target=reviewer, args=(arn, case, seen), daemon=True)
        thread.start()
        dag_run = dag.test(run_conf={"run_key": run_key})
        thread.join(timeout=240)
        ti = dag_run.get_task_instance("wait_for_approval")
        with create_session() as session:
            request = session.get(HITLDetail, ti.id)
            answer = {"chosen_options": request.chosen_options, "params_input": request.params_input,
                      "responded_by": request.responded_by} if request is not None else None
        package = sm.describe_model_package(ModelPackageName=arn)
        result[case] = {"state": str(getattr(dag_run.state, "value", dag_run.state)),
                        "ti_state": str(getattr(ti.state, "value", ti.state)),
                        "decision": ti.xcom_pull(task_ids="wait_for_approval", key="decision"),
                        "package": {k: package.get(k) for k in ("ModelApprovalStatus", "ApprovalDescription")},
                        "request": seen.get("request"), "answer": answer, "arn": arn}
    server.stop()
    Path(out).write_text(json.dumps(result, indent=2, default=str))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    summary, _ = drive_fresh("tests.orchestration.operators.test_model_approval_dag",
                             tmp_path_factory.mktemp("approval-dag"), "runs", timeout=880)
    return summary


def test_the_request_is_an_approval_with_a_comment_naming_the_package(runs):
    request = runs["approve"]["request"]
    assert request["options"] == ["Approve", "Reject"] and request["params"] == ["comment"]
    assert "run-approve" in request["subject"] and runs["approve"]["arn"] in request["body"]


def test_approve_in_sagemaker_ends_the_airflow_step(runs):
    run = runs["approve"]
    assert (run["state"], run["ti_state"]) == ("success", "success")
    assert run["package"] == {"ModelApprovalStatus": "Approved", "ApprovalDescription": "approved in Studio by carol"}
    assert run["decision"]["via"] == "sagemaker" and run["decision"]["comment"] == "approved in Studio by carol"


def test_reject_in_sagemaker_fails_the_run_with_the_decision_recorded(runs):
    run = runs["reject"]
    assert (run["state"], run["ti_state"]) == ("failed", "failed")
    assert run["package"]["ModelApprovalStatus"] == "Rejected"
    assert run["decision"]["via"] == "sagemaker" and run["decision"]["status"] == "Rejected"


def test_no_decision_times_out_and_fails_leaving_the_package_pending(runs):
    run = runs["nothing"]
    assert (run["state"], run["ti_state"]) == ("failed", "failed")
    assert run["package"]["ModelApprovalStatus"] == "PendingManualApproval" and run["decision"] is None
    assert run["answer"]["chosen_options"] is None  # nobody answered; the request stays as it was
