"""The ``sim_to_real`` trigger form in the real Airflow UI, end to end, in headless Chromium.

One :class:`sim2real.dev.ui.UiStack` (the ``make ui`` stack: the served sandbox plus ``airflow
standalone``) runs on free ports for the whole module, with a 1 s status poll. The browser is
Debian's ``chromium`` driven by Playwright (no browser download); without it the module is skipped.

The run triggered from the form is released by a person in the UI: the stack leaves the approval to Airflow
(no emulated reviewer), the test approves the model package on the approval step's Required Actions page with a
comment, then checks the package is Approved in the registry with that comment and approver, the run deployed,
and the run's "MLflow run" link opens the local MLflow tracking server's run.

Screenshots (the filled form, the approval request, the finished run's graph) go to the test's tmp dir, or to
``docs/img/trigger-form.png``, ``docs/img/approval.png`` and ``docs/img/run-graph.png`` when
``SIM2REAL_SAVE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sim2real.contract.run_key import make_run_key
from sim2real.orchestration.stages.run import build_params
from sim2real.dev.sandbox.__main__ import read_env_file
from sim2real.dev.ui import DAG_ID, REPO_ROOT, UiStack, free_port

from tests.dev.ui import STOP_GRACE_S

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.e2e,  # a whole DAG run: kept out of `make test-fast` like the other end-to-end runs
    pytest.mark.timeout(900),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH: `make browser-deps` installs Debian's "
                       "chromium (needs root or sudo and the Debian mirrors)"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")

RUN_TIMEOUT_S = 360
#: Status poll of the tests' waits (GET of one run or one request: cheap for the API server).
POLL_S = 0.5
SAVE_SCREENSHOTS = os.environ.get("SIM2REAL_SAVE_SCREENSHOTS") == "1"


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[UiStack]:
    home = tmp_path_factory.mktemp("ui-stack")
    # the approval is left to the test (a person in the UI); the local MLflow server backs the "MLflow run" link
    ui = UiStack(home, api_port=free_port(), poll_seconds=1, extra_env={"SIM2REAL_RETRY_DELAY_SECONDS": "1"},
                 decision="airflow", mlflow=True)
    started = time.monotonic()
    ui.start(timeout=300)
    print(f"UI stack ready in {time.monotonic() - started:.0f} s at {ui.url}")
    yield ui
    ui.stop(airflow_grace=STOP_GRACE_S)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM,
                                      args=["--no-sandbox", "--disable-dev-shm-usage", "--headless=new"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, stack) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    context.set_default_timeout(30_000)
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = REPO_ROOT / "docs" / "img" if SAVE_SCREENSHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ------------------------------------------------------------------------------------------------ helpers
PARAMS = build_params()
SECTIONS = list(dict.fromkeys(p.schema["section"] for p in PARAMS.values() if p.schema.get("section")))


def kind(key: str) -> str:
    """The form widget of a param: enum, boolean, integer, number or string."""
    schema = PARAMS[key].schema
    if "enum" in schema:
        return "enum"
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    return next(t for t in ("boolean", "integer", "number", "string") if t in types)


def diagnose(page, stack: UiStack, tmp: Path, message: str) -> str:
    """``message`` plus the page's text, where its HTML was saved, and the stack's log tails."""
    html = tmp / f"page-{int(time.time() * 1000)}.html"
    try:
        html.write_text(page.content())
        text = page.locator("body").inner_text()[-3000:]
    except Exception as err:  # noqa: BLE001 - the page itself may be gone
        text = f"(page unreadable: {err})"
    return f"{message}\n--- page text (tail)\n{text}\n--- page HTML saved to {html}\n{stack.logs_tail(60)}"


def open_trigger_form(page, stack: UiStack):
    page.goto(stack.dag_url)
    page.get_by_role("button", name="Trigger Dag").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Trigger", exact=True).wait_for()
    return dialog


def open_section(dialog, section: str) -> None:
    """Expand one accordion section (the form keeps one open at a time)."""
    trigger = dialog.get_by_role("button", name=section, exact=True)
    if trigger.get_attribute("aria-expanded") != "true":
        trigger.click()
    dialog.locator(f'[data-part="item-content"][id$=":content:{section}"]').wait_for(state="visible")


def field(dialog, key: str):
    """The input named ``element_<key>`` (for enums: the hidden input holding the selected value)."""
    return dialog.locator(f'input[name="element_{key}"]')


def fill(dialog, key: str, value: Any) -> None:
    """Type ``value`` into the param's widget the way a person would, then check what the widget holds."""
    widget = kind(key)
    if widget == "enum":
        group = dialog.locator('[data-part="root"][role="group"]',
                               has=dialog.page.locator(f'input[name="element_{key}"]'))
        combobox = group.get_by_role("combobox")
        combobox.click()
        combobox.fill(str(value))
        # the option list may be rendered outside the field (a portal): look for it in the whole page
        dialog.page.get_by_role("option", name=str(value), exact=True).click()
        assert field(dialog, key).input_value() == str(value), key
    elif widget == "boolean":
        box = field(dialog, key)
        if box.is_checked() != bool(value):
            dialog.locator(f'label[id="switch:element_{key}"]').click()
        assert box.is_checked() == bool(value), key
    else:
        box = field(dialog, key)
        box.fill(str(value))
        box.press("Tab")  # commit: number inputs parse on blur
        assert box.input_value() == str(value), (key, box.input_value())


# ------------------------------------------------------------------------------------------------ tests
def test_form_has_every_section_and_its_defaults_can_be_triggered(page, stack, tmp_path):
    dialog = open_trigger_form(page, stack)
    for section in SECTIONS:
        assert dialog.get_by_role("button", name=section, exact=True).is_visible(), diagnose(
            page, stack, tmp_path, f"section {section!r} of the trigger form is missing")
    open_section(dialog, SECTIONS[0])
    assert field(dialog, "num_nodes").input_value() == str(PARAMS["num_nodes"].value)
    if dialog.get_by_role("button", name="Trigger", exact=True).is_enabled():
        return
    # The form refuses its own defaults: name the fields it marks required while empty (every
    # section's fields are in the DOM, collapsed or not).
    required = {key: dialog.locator(f'input[name="element_{key}"][required]') for key in PARAMS}
    empty_required = sorted(key for key, box in required.items() if box.count() and box.input_value() == "")
    pytest.fail(diagnose(page, stack, tmp_path, "the Trigger button is disabled with the form's defaults; empty "
                         f"required fields: {empty_required}"))


#: Values typed in the form: small ones that make the run fast, one per widget kind at least.
#: Keys missing from the DAG's params are left out (the DAG may change). Optional text fields are
#: nullable: two are typed, two (EMPTY_OPTIONAL) are left empty and must reach the run as null.
EMPTY_OPTIONAL = ("hyperpod_cluster_name", "dataset_s3_uri")


def form_values(stack: UiStack) -> dict[str, Any]:
    env = json.loads(read_env_file(stack.env_file)["AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"])
    values: dict[str, Any] = {
        "training_backend": "batch",                      # enum
        "task": "Reacher-v5",                             # enum
        "max_iterations": 2,                              # integer (2 PPO iterations: a toy policy)
        "num_envs": 4,
        "seed": 7,
        "train_time_budget_seconds": 300,                 # a bound only: iterations end training
        "image_source_version": env["image_build"]["source_version"],   # optional string, typed
        "eval_episodes": 5,
        "eval_seed": 2024,
        "min_success_rate": 0,                            # number: the gate passes whatever the toy policy does
        "gate_on_lower_bound": False,                     # boolean switch (default on: typed off, so it is clicked)
        "embodiment_tag": "libero_panda",                 # string with a pattern (one of GR00T N1.6's tags)
        "vla_instance_type": "ml.g6e.12xlarge",           # enum
        "vla_max_steps": 100,
        "vla_global_batch_size": 16,
        "thing_group_name": env["greengrass"]["thing_group_name"],
        "rollout_max_per_minute": 20,
        "abort_failure_threshold_percent": 50.5,          # number with a fraction
        "runnable_timeout_minutes": 10,
        "training_timeout_hours": 1.5,
        "eval_timeout_minutes": 10,
        "max_budget_usd": 800,
    }
    return {key: value for key, value in values.items() if key in PARAMS and value != ""}


def fill_form(dialog, values: dict[str, Any]) -> None:
    for section in SECTIONS:
        keys = [k for k in values if PARAMS[k].schema.get("section") == section]
        if keys:
            open_section(dialog, section)
        for key in keys:
            fill(dialog, key, values[key])


def is_trigger_request(response) -> bool:
    """The form's POST /api/v2/dags/<dag>/dagRuns."""
    return response.request.method == "POST" and response.url.endswith(f"/dags/{DAG_ID}/dagRuns")


def dag_run_ids(stack: UiStack) -> set[str]:
    runs = stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
    return {run["dag_run_id"] for run in runs}


def test_invalid_value_shows_the_error_and_creates_no_run(page, stack, tmp_path):
    before = dag_run_ids(stack)
    dialog = open_trigger_form(page, stack)
    fill_form(dialog, {k: v for k, v in form_values(stack).items() if kind(k) == "string" and k != "embodiment_tag"})
    # An out-of-range number is kept as typed (never clamped to the bounds) and refused by Airflow's param
    # validation with the reason, shown in the form; no run is created.
    open_section(dialog, PARAMS["num_nodes"].schema["section"])
    nodes = field(dialog, "num_nodes")
    nodes.fill("-5")
    nodes.press("Tab")
    assert nodes.input_value() == "-5", "the form changed the typed value"
    with page.expect_response(is_trigger_request) as resp:
        dialog.get_by_role("button", name="Trigger", exact=True).click()
    assert resp.value.status == 400, diagnose(page, stack, tmp_path, f"expected 400, got {resp.value.status}")
    error = dialog.get_by_text("Invalid input for param num_nodes")
    try:
        error.wait_for(state="visible")
    except sync_api.TimeoutError:
        pytest.fail(diagnose(page, stack, tmp_path, "the form did not show the range error"))
    assert "less than the minimum of 1" in error.inner_text()
    nodes.fill("1")
    nodes.press("Tab")
    # A value against the field's pattern is refused by Airflow's param validation, shown in the form.
    open_section(dialog, PARAMS["embodiment_tag"].schema["section"])
    field(dialog, "embodiment_tag").fill("Bad Tag!")
    with page.expect_response(is_trigger_request) as resp:
        dialog.get_by_role("button", name="Trigger", exact=True).click()
    assert resp.value.status == 400, diagnose(page, stack, tmp_path, f"expected 400, got {resp.value.status}")
    error = dialog.get_by_text("Invalid input for param embodiment_tag")
    try:
        error.wait_for(state="visible")
    except sync_api.TimeoutError:
        pytest.fail(diagnose(page, stack, tmp_path, "the form did not show the param validation error"))
    assert "does not match" in error.inner_text()
    assert dialog.is_visible()
    assert dag_run_ids(stack) == before, "a run was created from an invalid form"


def wait_for_run(stack: UiStack, run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}"
    while True:
        try:
            run = stack.api("GET", path)
        except (TimeoutError, urllib.error.URLError) as err:  # a busy API server (SQLite on a loaded machine)
            if isinstance(err, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise
            continue
        if run["state"] in ("success", "failed") or time.monotonic() > deadline:
            return run
        time.sleep(POLL_S)


def failed_task_logs(stack: UiStack, run_id: str) -> str:
    """The failed/unfinished tasks of the run and the tail of each failed task's log."""
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"
    tis = stack.api("GET", f"{base}/taskInstances?limit=100")["task_instances"]
    lines = [f"{ti['task_id']}: {ti['state']}" for ti in tis if ti["state"] not in ("success", "skipped")]
    for ti in tis:
        if ti["state"] in ("failed", "upstream_failed") and ti.get("try_number"):
            try:
                log = stack.api("GET", f"{base}/taskInstances/{ti['task_id']}/logs/{ti['try_number']}"
                                "?full_content=true")
                content = log.get("content")
                text = "\n".join(str(c.get("event", c)) if isinstance(c, dict) else str(c) for c in content) \
                    if isinstance(content, list) else str(content)
                lines.append(f"--- log of {ti['task_id']} (try {ti['try_number']}, tail)\n{text[-2500:]}")
            except Exception as err:  # noqa: BLE001 - diagnostics only
                lines.append(f"--- log of {ti['task_id']}: unreadable ({err})")
    return "\n".join(lines)


APPROVAL_TASK = "vla.wait_for_approval"


def approve_in_the_ui(page, stack: UiStack, tmp: Path, shots: Path, run_id: str, comment: str) -> None:
    """Wait for the approval step's request, then Approve it on its Required Actions page with ``comment``."""
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    request = None
    while request is None:
        try:
            request = stack.api("GET", f"{base}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails")
        except (TimeoutError, urllib.error.URLError) as err:  # HTTPError included; 404: no request yet
            if isinstance(err, urllib.error.HTTPError) and err.code != 404:
                raise
            if not isinstance(err, urllib.error.HTTPError):  # a busy API server (SQLite on a loaded machine)
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)
                continue
            run = stack.api("GET", base)
            if run["state"] in ("success", "failed") or time.monotonic() > deadline:
                pytest.fail(diagnose(page, stack, tmp, f"run {run_id} is {run['state']} and never asked for approval:\n"
                                     + failed_task_logs(stack, run_id)))
            time.sleep(POLL_S)
    assert request["options"] == ["Approve", "Reject"] and not request["response_received"], request
    for fact in ("Success rate", "Smoke check", "GPU cost so far", "Model package", "Training curve", "MLflow run"):
        assert fact in request["body"], f"{fact!r} missing from the approval request:\n{request['body']}"
    page.goto(f"{stack.dag_url}/runs/{quote(run_id, safe='')}/tasks/{APPROVAL_TASK}/required_actions")
    try:
        box = page.locator('[name="element_comment"]')
        box.wait_for(state="visible")
        box.fill(comment)
        page.screenshot(path=str(shots / "approval.png"), full_page=True)
        page.get_by_role("button", name="Approve", exact=True).click()
    except sync_api.TimeoutError:
        pytest.fail(diagnose(page, stack, tmp, "the approval request's form did not render on Required Actions"))
    deadline = time.monotonic() + 60
    while not stack.api("GET", f"{base}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails")["response_received"]:
        if time.monotonic() > deadline:
            pytest.fail(diagnose(page, stack, tmp, "clicking Approve recorded no response"))
        time.sleep(POLL_S)


def run_model_package(stack: UiStack, run_id: str) -> dict[str, Any]:
    """The run's model package in the sandbox's registry (DescribeModelPackage)."""
    import boto3

    from sim2real.orchestration.hooks.model_registry import package_matches

    env = read_env_file(stack.env_file)
    group = json.loads(env["AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"])["sagemaker"]["model_package_group"]
    sm = boto3.client("sagemaker", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    run_key = make_run_key(DAG_ID, run_id)
    for summary in sm.list_model_packages(ModelPackageGroupName=group)["ModelPackageSummaryList"]:
        package = sm.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
        if package_matches(package, run_key, None):
            return package
    pytest.fail(f"no model package of run {run_key} in {group}")


def check_mlflow_link(page, stack: UiStack, tmp: Path, run_id: str) -> None:
    """The run's "MLflow run" extra link (on prepare_run) is there and opens the run in the MLflow UI."""
    links = stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/prepare_run/links")[
        "extra_links"]
    url = links.get("MLflow run")
    env = read_env_file(stack.env_file)
    assert url and url.startswith(env["SIM2REAL_MLFLOW_UI_URL"].rstrip("/") + "/#/experiments/"), links
    page.goto(url)
    try:
        page.get_by_text(make_run_key(DAG_ID, run_id)).first.wait_for(state="visible")
    except sync_api.TimeoutError:
        pytest.fail(diagnose(page, stack, tmp, f"the MLflow run page {url} does not show the run"))


def test_run_from_the_form_succeeds_with_the_typed_values(page, stack, tmp_path, shots):
    started = time.monotonic()
    values = form_values(stack)
    assert {kind(k) for k in values} >= {"enum", "boolean", "integer", "number", "string"}
    dialog = open_trigger_form(page, stack)
    fill_form(dialog, values)
    open_section(dialog, SECTIONS[0])
    page.set_viewport_size({"width": 1400, "height": 2000})  # the whole modal in view for its screenshot
    page.wait_for_timeout(300)  # the modal re-centres after the resize; nothing to wait for in the DOM
    dialog.screenshot(path=str(shots / "trigger-form.png"))
    trigger = dialog.get_by_role("button", name="Trigger", exact=True)
    assert trigger.is_enabled(), diagnose(page, stack, tmp_path, "Trigger is disabled after filling the form")
    with page.expect_response(is_trigger_request) as resp:
        trigger.click()
    assert resp.value.status in (200, 201), diagnose(page, stack, tmp_path, f"trigger answered {resp.value.status}: "
                                                     f"{resp.value.text()[:2000]}")
    run_id = resp.value.json()["dag_run_id"]
    # The test waits through the REST API from here: the page leaves the DAG's grid, which the UI refreshes every few
    # seconds while a run goes (the API server used 60 of this file's 182 CPU-seconds, 2026-12-04; the grid's and
    # the DAG structure's endpoints, which deserialize the whole DAG, were its largest route handlers)
    page.goto("about:blank")

    comment = "approved from the browser test after reading the review"
    approve_in_the_ui(page, stack, tmp_path, shots, run_id, comment)
    page.goto("about:blank")  # and leaves the Required Actions page once the answer is recorded
    run = wait_for_run(stack, run_id, RUN_TIMEOUT_S)
    assert run["state"] == "success", diagnose(
        page, stack, tmp_path, f"run {run_id} ended {run['state']} (or timed out after {RUN_TIMEOUT_S} s):\n"
        + failed_task_logs(stack, run_id))
    conf = run["conf"]
    wrong = {k: (conf.get(k), v) for k, v in values.items() if conf.get(k) != v}
    assert not wrong, f"run conf differs from the typed values (conf, typed): {wrong}"
    assert conf["num_nodes"] == PARAMS["num_nodes"].value  # untouched fields keep their defaults
    # Optional text fields left empty reach the run as null (the run used the config's values).
    assert {k: conf.get(k) for k in EMPTY_OPTIONAL if k in PARAMS} == {k: None for k in EMPTY_OPTIONAL if k in PARAMS}
    # The approval reached the registry: Approved, by the UI's user, with the comment; then the run deployed.
    package = run_model_package(stack, run_id)
    assert package["ModelApprovalStatus"] == "Approved", package
    assert " in Airflow by " in package["ApprovalDescription"] and package["ApprovalDescription"].endswith(comment)
    tasks = {ti["task_id"]: ti["state"] for ti in stack.api(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances?limit=100")["task_instances"]}
    assert tasks["vla.wait_for_approval"] == "success" and tasks["deploy.deploy_to_robots"] == "success", tasks
    check_mlflow_link(page, stack, tmp_path, run_id)
    # The waits deferred and their triggers ran in the standalone triggerer (one log per trigger).
    run_logs = stack.airflow_home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
    trigger_logs = list(run_logs.glob("task_id=*/attempt=*.log.trigger.*.log"))
    assert trigger_logs, f"no task of run {run_id} ran a trigger in the triggerer"

    # The finished run's graph, as a person would look at it.
    page.set_viewport_size({"width": 1700, "height": 650})
    page.goto(f"{stack.dag_url}/runs/{quote(run_id, safe='')}")
    page.get_by_role("button", name="Show Graph (Press g)").click()
    try:
        page.locator(".react-flow__node").first.wait_for(state="visible")
        page.get_by_role("button", name="Collapse Details Panel").click()
        page.wait_for_load_state("networkidle")
        page.get_by_role("button", name="Fit View").click()
    except sync_api.TimeoutError:
        pytest.fail(diagnose(page, stack, tmp_path, "the run's graph did not render"))
    page.wait_for_timeout(500)  # Fit View animates the viewport; the DOM has no end-of-animation marker
    page.screenshot(path=str(shots / "run-graph.png"))
    print(f"browser test: form filled, run {run_id} succeeded, graph captured in {time.monotonic() - started:.0f} s")
