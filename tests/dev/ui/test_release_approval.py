"""The release approval as people use it: four-eyes and one decision, against a real ``airflow standalone``
(scheduler, triggerer, API server; SimpleAuthManager with three users) on the served sandbox.

One :class:`sim2real.dev.ui.UiStack` for the module, users ``alice`` (triggers the runs), ``bob`` (a listed
approver) and ``mallory`` (an admin who is not listed); the environment config's ``approval.approvers`` is
``alice,bob`` (``SIM2REAL_APPROVERS``), so the request is assigned to bob alone: alice is listed but triggered.

One run: alice is refused in the browser (Required Actions) and through the REST API
(``PATCH .../taskInstances/{task_id}/{map_index}/hitlDetails``), mallory through the API; bob approves and carol
rejects in the registry 30 ms later: one decision (bob's, the first), registry, lineage and deployment agree, carol's
is refused visibly (the package's ApprovalDescription, the lineage's ``approval.refused``); the lineage names bob
and alice. The other order, the compare-and-set and retries are covered with controlled interleavings in
``tests/orchestration/operators/test_model_approval_decisions.py``.
"""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import boto3
import pytest

from sim2real.contract.run_key import make_run_key
from sim2real.dev.sandbox.__main__ import read_env_file
from sim2real.dev.ui import DAG_ID, UiStack, free_port

from tests.dev.ui import STOP_GRACE_S
from tests.dev.ui.test_trigger_form import (
    APPROVAL_TASK,
    CHROMIUM,
    diagnose,
    failed_task_logs,
    form_values,
    run_model_package,
    wait_for_run,
)

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(3600)]

USERS = {"alice": "user", "bob": "user", "mallory": "admin"}
RUN_TIMEOUT_S = 1500  # a whole run on a loaded 2-core machine


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[UiStack]:
    home = tmp_path_factory.mktemp("ui-approval")
    ui = UiStack(home, api_port=free_port(), poll_seconds=1, decision="airflow", mlflow=False, users=USERS,
                 extra_env={"SIM2REAL_RETRY_DELAY_SECONDS": "1", "SIM2REAL_APPROVERS": "alice,bob",
                            # a loaded machine answers the Execution API slowly: no task lost to a 5 s read timeout
                            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60"})
    started = time.monotonic()
    ui.start(timeout=300)
    print(f"UI stack with users ready in {time.monotonic() - started:.0f} s at {ui.url}")
    yield ui
    ui.stop(airflow_grace=STOP_GRACE_S)


def base(run_id: str) -> str:
    return f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"


def trigger_as(stack: UiStack, user: str) -> str:
    run = stack.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": form_values(stack)},
                    user=user)
    assert run["triggering_user_name"] == user, run
    return run["dag_run_id"]


def deferred_request(stack: UiStack, run_id: str, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """The approval step's request once its task is deferred (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            try:
                request = stack.api("GET", f"{base(run_id)}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails")
                if request["task_instance"]["state"] == "deferred":
                    return request
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
                run = stack.api("GET", base(run_id))
                assert run["state"] not in ("success", "failed"), failed_task_logs(stack, run_id)
        except urllib.error.HTTPError:
            raise
        except (TimeoutError, urllib.error.URLError):
            pass  # a busy API server on a loaded machine
        assert time.monotonic() < deadline, f"run {run_id} never asked for approval:\n{failed_task_logs(stack, run_id)}"
        time.sleep(0.1)


def answer(stack: UiStack, run_id: str, user: str, option: str, comment: str) -> tuple[int, str]:
    """PATCH the request as ``user``: ``(HTTP status, body)``."""
    try:
        stack.api("PATCH", f"{base(run_id)}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails",
                  {"chosen_options": [option], "params_input": {"comment": comment}}, user=user)
        return 200, ""
    except urllib.error.HTTPError as err:
        return err.code, str(err.reason)


def registry(stack: UiStack):
    env = read_env_file(stack.env_file)
    return boto3.client("sagemaker", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def lineage(stack: UiStack, run_id: str) -> dict[str, Any]:
    env = read_env_file(stack.env_file)
    bucket = json.loads(env["AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"])["artifacts_bucket"]
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    key = f"runs/{make_run_key(DAG_ID, run_id)}/lineage.json"
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def task_states(stack: UiStack, run_id: str) -> dict[str, Any]:
    tis = stack.api("GET", f"{base(run_id)}/taskInstances?limit=100")["task_instances"]
    return {ti["task_id"]: (ti["state"], ti["try_number"]) for ti in tis}


def refused_in_the_browser(stack: UiStack, run_id: str, user: str, tmp_path) -> str:
    """``user`` opens the request on Required Actions and clicks Approve: what the UI and the API did."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if CHROMIUM is None:
        pytest.skip("chromium is not on PATH (make browser-deps)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM,
                                     args=["--no-sandbox", "--disable-dev-shm-usage", "--headless=new"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1100})
            context.set_default_timeout(30_000)
            # Logged in as the user: the SimpleAuthManager's JWT in the cookie its login form sets.
            context.add_cookies([{"name": "_token", "value": stack.token(user), "url": stack.url}])
            page = context.new_page()
            page.goto(f"{stack.dag_url}/runs/{quote(run_id, safe='')}/tasks/{APPROVAL_TASK}/required_actions")
            try:
                page.locator('[name="element_comment"]').wait_for(state="visible")
                page.locator('[name="element_comment"]').fill("my own run looks fine")
                approve = page.get_by_role("button", name="Approve", exact=True)
                if not approve.is_enabled():
                    return "the Approve button is disabled"
                with page.expect_response(lambda r: r.request.method == "PATCH" and "hitlDetails" in r.url) as resp:
                    approve.click()
            except sync_api.TimeoutError:
                pytest.fail(diagnose(page, stack, tmp_path, "the request's form did not render for " + user))
            assert resp.value.status == 403, diagnose(page, stack, tmp_path, f"{user}'s Approve got {resp.value.status}")
            return f"HTTP {resp.value.status}: {resp.value.text()}"
        finally:
            browser.close()


# ------------------------------------------------------------------------------------------------ the release
def test_four_eyes_and_one_decision_when_an_answer_and_a_registry_reject_meet(stack, tmp_path):
    """alice triggers; she (in the browser and the API) and mallory (the API) are refused; bob approves; carol
    rejects in SageMaker 30 ms later: bob's answer came first and stands, carol's is refused visibly; deployed."""
    run_id = trigger_as(stack, "alice")
    request = deferred_request(stack, run_id)
    assert [u["id"] for u in request["assigned_users"]] == ["bob"], request["assigned_users"]
    assert "**Who may answer:** bob — not alice, who triggered this run" in request["body"]

    seen = refused_in_the_browser(stack, run_id, "alice", tmp_path)
    assert "not a respondent" in seen or "disabled" in seen, seen
    status, why = answer(stack, run_id, "alice", "Approve", "my own run")
    assert status == 403 and "alice" in why and "not a respondent" in why, (status, why)
    status, why = answer(stack, run_id, "mallory", "Approve", "admin, not listed")
    assert status == 403 and "mallory" in why, (status, why)
    open_request = stack.api("GET", f"{base(run_id)}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails")
    assert not open_request["response_received"], open_request  # still open for bob

    arn = run_model_package(stack, run_id)["ModelPackageArn"]
    assert answer(stack, run_id, "bob", "Approve", "second pair of eyes") == (200, "")
    time.sleep(0.03)
    registry(stack).update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Rejected",
                                         ApprovalDescription="carol in Studio: drops the cube")
    run = wait_for_run(stack, run_id, RUN_TIMEOUT_S)
    assert run["state"] == "success", failed_task_logs(stack, run_id)
    tasks = task_states(stack, run_id)
    assert tasks["deploy.deploy_to_robots"][0] == "success", tasks
    # One decision: bob's (first), in the registry, the lineage and the deployment; carol's refused, visibly.
    package = registry(stack).describe_model_package(ModelPackageName=arn)
    assert package["ModelApprovalStatus"] == "Approved"
    assert package["ApprovalDescription"].startswith("Approved in Airflow by bob at ")
    assert "| Refused: Reject by " in package["ApprovalDescription"], package["ApprovalDescription"]
    entry = lineage(stack, run_id)["approval"]
    assert (entry["decided_by"], entry["via"], entry["triggered_by"], entry["status"]) == (
        "bob", "airflow", "alice", "Approved"), entry
    assert [(r["via"], r["status"]) for r in entry["refused"]] == [("sagemaker", "Rejected")], entry
