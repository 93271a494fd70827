"""The "MLflow run" extra link: the DAG run's parent run in the MLflow UI.

URL layout of the MLflow UI (MLflow 2.x/3.x single-page app): ``<ui>/#/experiments/<experiment id>/runs/<run id>``;
the parent run's page lists its child runs (RL training, evaluation, fine-tune). For SageMaker managed MLflow the
UI is the tracking server's ``TrackingServerUrl`` (opened once through SageMaker Studio or
``CreatePresignedMlflowTrackingServerUrl``, which signs the browser in); in the sandbox it is the local
``mlflow server``.

The task that creates the runs persists the link (:meth:`MlflowRunLink.persist`, an XCom like the provider's
links); no link is shown when tracking is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperatorLink, XCom

from sim2real.orchestration.links import nothing_persisted, record_push


class MlflowRunLink(BaseOperatorLink):
    """Link to the DAG run's MLflow parent run (empty when tracking is off)."""

    name = "MLflow run"
    key = "sim2real_mlflow_run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        if nothing_persisted(ti_key, self.key):  # an untracked run: no lookup (and no "XCom not found")
            return ""
        url = XCom.get_value(key=self.key, ti_key=ti_key)
        return url if isinstance(url, str) else ""

    @classmethod
    def persist(cls, ti: Any, tracking: Mapping[str, Any] | None) -> str | None:
        """Persist the parent run's URL for the running task instance; :return: the URL (``None``: tracking off)."""
        url = run_url(tracking)
        if url:
            ti.xcom_push(key=cls.key, value=url)
            record_push(ti, cls.key)
        return url


def run_url(tracking: Mapping[str, Any] | None, run_id: str | None = None) -> str | None:
    """The MLflow UI page of ``run_id`` (default the parent run): ``<ui>/#/experiments/<id>/runs/<run id>``;
    ``None`` when tracking is off or no UI URL is known."""
    if not tracking or not tracking.get("enabled") or not tracking.get("ui_url"):
        return None
    return f"{tracking['ui_url'].rstrip('/')}/#/experiments/{tracking['experiment_id']}/runs/" \
           f"{run_id or tracking['parent_run_id']}"
