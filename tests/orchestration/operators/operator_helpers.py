"""Plain helpers shared by the operator tests (the fixtures are in ``conftest.py``).

* ``FakeTI``: just enough of a task instance for ``operator.execute``: ``dag_id``/``task_id`` and an
  in-memory XCom (``ti.xcom``) behind ``xcom_push``/``xcom_pull``.
* ``first_event(trigger)``: run a trigger until its first event and return that event's payload
  (the trigger's generator is closed afterwards).
* ``hyperpod_sandbox`` / ``hyperpod_sandbox_fixture``: a sandbox whose HyperPod Slurm runs a tiny test launcher
  (:func:`slurm_launcher`) for every job.

Named ``operator_helpers`` rather than ``helpers`` so it cannot clash with another test folder's
module of the same name on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import contextlib


class FakeTI:
    dag_id = "sim_to_real"

    def __init__(self, task_id: str = "task"):
        self.task_id = task_id
        self.xcom: dict = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.xcom.get(key)


def first_event(trigger):
    async def go():
        gen = trigger.run()
        try:
            return (await gen.__anext__()).payload
        finally:
            await gen.aclose()

    return asyncio.run(go())


def slurm_launcher(report: str) -> str:
    """A bash launcher for the sandbox's Slurm jobs: runs ``report`` (a bash line, e.g. an ``echo`` of the task's
    Slurm variables), then, while ``$HOLD_FILE`` is set and absent, waits for it (a test creates it once it has seen
    the operator defer, so a job is never over before the operator looks), sleeps ``$SLEEP_SECONDS`` (default 0)
    and exits with ``$EXIT_CODE`` (default 0)."""
    return f"""#!/bin/bash
{report}
while [ -n "${{HOLD_FILE:-}}" ] && [ ! -e "$HOLD_FILE" ]; do sleep 0.05; done
sleep "${{SLEEP_SECONDS:-0}}"
exit "${{EXIT_CODE:-0}}"
"""


def hyperpod_sandbox_fixture(report: str):
    """A module-scoped pytest fixture (assign it to ``sandbox`` in a test module) yielding :func:`hyperpod_sandbox`
    whose jobs run :func:`slurm_launcher` (``report``)."""
    import pytest

    @pytest.fixture(scope="module")
    def sandbox(tmp_path_factory):
        with hyperpod_sandbox(tmp_path_factory, slurm_launcher(report)) as sb:
            yield sb

    return sandbox


@contextlib.contextmanager
def hyperpod_sandbox(tmp_path_factory, launcher: str, gpu_nodes: int = 2):
    """A provisioned sandbox whose HyperPod GPU group has ``gpu_nodes`` Running nodes and whose Slurm runs
    ``launcher`` (a bash script's text) for every job (``sb.test_launcher``); the Airflow side's environment points at
    it while the context is open."""
    import time

    import pytest

    from sim2real.dev.sandbox import Sandbox
    from sim2real.orchestration.hooks.hyperpod import instance_group_specs

    mp = pytest.MonkeyPatch()
    try:
        with Sandbox(step_seconds=0.05) as sb:
            sb.provision()
            for key, value in sb.airflow_env().items():
                mp.setenv(key, value)
            sm = sb.client("sagemaker", internal=True)
            describe = sm.describe_cluster(ClusterName="sim2real-hyperpod")
            specs, _ = instance_group_specs(sm, describe, "gpu", gpu_nodes)
            sm.update_cluster(ClusterName="sim2real-hyperpod", InstanceGroups=specs)
            deadline = time.monotonic() + 30
            while len(sm.list_cluster_nodes(ClusterName="sim2real-hyperpod", InstanceGroupNameContains="gpu")
                      ["ClusterNodeSummaries"]) < gpu_nodes and time.monotonic() < deadline:
                time.sleep(0.2)
            path = tmp_path_factory.mktemp("slurm") / "launcher.sh"
            path.write_text(launcher)
            sb.test_launcher = str(path)
            yield sb
    finally:
        mp.undo()

