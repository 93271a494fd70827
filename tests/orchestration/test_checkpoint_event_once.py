"""The checkpoint asset event is announced once per sha256 and DAG run, under a real Airflow (``dag.test()``).

One subprocess (a fresh ``AIRFLOW_HOME`` and SQLite metadata database; Airflow reads its config at import) runs a
one-task DAG whose task has the checkpoint sensor's outlet, inlet and ``post_execute``
(``sim2real.orchestration.stages.checkpoint``), returning the manifest named in the run's conf. ``dag.test()`` with
the same logical date clears the run and runs it again under the same run id (``get_or_create_dagrun`` replaces
the run; the asset events of the first try stay, as they do after a whole-run clear). The events recorded for
``sim2real_rl_checkpoint`` are read from Airflow's database.
"""

from __future__ import annotations

import json

import pytest

from tests.fresh_process import drive_fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]  # integration: dag.test() on an Airflow metadata DB

SHA_A, SHA_B = "aa" * 32, "bb" * 32

DAG_FILE = """
import datetime as dt

from airflow.sdk import DAG, BaseOperator

from sim2real.orchestration import assets
from sim2real.orchestration.assets import CHECKPOINT_ANNOUNCEMENTS


class ManifestOf(BaseOperator):
    def execute(self, context):
        sha = context["dag_run"].conf["sha256"]
        return {"checkpoint_uri": f"s3://b/runs/k/checkpoints/{sha[:8]}.pt", "sha256": sha, "iteration": 3}


with DAG("checkpoint_event", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False):
    ManifestOf(task_id="wait_for_checkpoint", outlets=[CHECKPOINT_ANNOUNCEMENTS], inlets=[CHECKPOINT_ANNOUNCEMENTS],
               post_execute=assets.checkpoint_post_execute)
"""


def drive(home: str, out: str) -> None:
    """Subprocess body: the Airflow home, four runs; writes the recorded events to ``out``."""
    import datetime as dt
    from pathlib import Path

    from sim2real.dev.demo import prepare_airflow_home

    dag_file = Path(home) / "dags" / "checkpoint_event.py"
    dag_file.parent.mkdir(parents=True, exist_ok=True)
    dag_file.write_text(DAG_FILE)
    prepare_airflow_home(Path(home), {"AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)})

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags["checkpoint_event"]
    first, second = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc), dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc)
    runs = []
    for logical_date, sha in ((first, SHA_A), (first, SHA_A), (first, SHA_B), (second, SHA_A)):
        dag_run = dag.test(logical_date=logical_date, run_after=logical_date, run_conf={"sha256": sha})
        runs.append({"run_id": dag_run.run_id, "state": str(getattr(dag_run.state, "value", dag_run.state))})
        with create_session() as session:
            rows = session.execute(
                select(AssetEvent.source_run_id, AssetEvent.extra).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .where(AssetModel.name == "sim2real_rl_checkpoint").order_by(AssetEvent.id)).all()
        runs[-1]["events"] = [{"run_id": run_id, "sha256": (extra or {}).get("sha256")} for run_id, extra in rows]
    Path(out).write_text(json.dumps(runs, indent=2, default=str))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list:
    summary, _ = drive_fresh("tests.orchestration.test_checkpoint_event_once", tmp_path_factory.mktemp("checkpoint-event"),
                             "runs", timeout=580)
    return summary


def test_a_cleared_run_does_not_announce_the_same_checkpoint_again(runs):
    first, cleared, other_sha, other_run = runs
    assert all(r["state"] == "success" for r in runs), runs
    assert first["run_id"] == cleared["run_id"] == other_sha["run_id"] != other_run["run_id"]
    assert first["events"] == [{"run_id": first["run_id"], "sha256": SHA_A}]
    assert cleared["events"] == first["events"]  # the same sha256 again in the same run: no second event


def test_a_different_checkpoint_or_another_run_is_announced(runs):
    first, _, other_sha, other_run = runs
    assert other_sha["events"] == first["events"] + [{"run_id": first["run_id"], "sha256": SHA_B}]
    assert other_run["events"] == other_sha["events"] + [{"run_id": other_run["run_id"], "sha256": SHA_A}]
