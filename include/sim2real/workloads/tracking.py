"""MLflow experiment tracking for the trainer and the evaluator (params, batched metrics, artefacts).

:func:`run_logger_from_env` reads the tracking contract (:mod:`sim2real.contract.tracking`) from the environment:

* no ``MLFLOW_TRACKING_URI`` (or an empty one): tracking is off, a :class:`NullRunLogger` is returned and
  nothing is imported or sent;
* ``MLFLOW_RUN_ID`` set (the DAG's child run for this stage): the workload logs into that run, and a
  restarted job (Batch retry, resume from a checkpoint) logs into the same run again;
* otherwise a new run is created in ``MLFLOW_EXPERIMENT_ID`` (else the ``sim2real`` experiment), a child of
  ``SIM2REAL_MLFLOW_PARENT_RUN_ID`` when that is set.

Metrics are buffered and sent with ``MlflowClient.log_batch`` (one request per ``SIM2REAL_MLFLOW_FLUSH_EVERY``
iterations, default 10, and at the end), never one request per metric: SageMaker managed MLflow is slow
metric by metric. A tracking URI that is a SageMaker MLflow tracking server ARN is resolved by the
``sagemaker-mlflow`` plugin (installed in the images, requirements-workload.txt; SigV4 with the job's role).

Tracking never decides a job's outcome: when the server cannot be reached or refuses a request, the error
is printed once on stderr (``[sim2real] mlflow: ...``) and the logger turns itself off; training and
evaluation go on and write their usual outputs. ``mlflow`` is imported only when tracking is on.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from sim2real.contract import env_vars
from sim2real.contract import tracking as contract

PREFIX = "[sim2real] mlflow:"
#: MLflow's limits per ``log_batch`` request (``mlflow.utils.validation``: 1000 metrics, 100 params,
#: 100 tags); larger batches are split.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
#: MLflow's limit on a param value's length (``MAX_PARAM_VAL_LENGTH``, 6000 characters).
MAX_PARAM_LENGTH = 6000


class NullRunLogger:
    """Tracking off: every method does nothing. ``enabled`` is False, ``run_id`` is None."""

    enabled = False
    run_id: str | None = None
    experiment_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def flush(self) -> None:
        pass

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        pass

    def finish(self, status: str = "FINISHED") -> None:
        pass


class RunLogger(NullRunLogger):
    """Logs into one MLflow run through ``mlflow.MlflowClient``.

    :param client: an ``mlflow.MlflowClient`` bound to the tracking server.
    :param run_id: the run logged into (it must exist).
    :param flush_every: send the buffered metrics once this many distinct steps are buffered (>= 1).
    """

    enabled = True

    def __init__(self, client: Any, run_id: str, *, experiment_id: str | None = None, flush_every: int = 10) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.flush_every = max(1, int(flush_every))
        self._metrics: list[Any] = []
        self._steps: set[int] = set()
        #: requests sent (log_batch calls), for the tests and the summary line
        self.batches_sent = 0

    def _fail(self, what: str, err: BaseException) -> None:
        print(f"{PREFIX} {what} failed for run {self.run_id}: {type(err).__name__}: {err}; tracking is off for the "
              "rest of this job (its other outputs are not affected)", file=sys.stderr, flush=True)
        self.enabled = False
        self._metrics.clear()
        self._steps.clear()

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log ``params`` (values as text, cut to MLflow's 6000 characters) in batches of 100.

        A param already logged with the same value (a resumed job) is accepted by MLflow; a different value
        is refused, and the logger turns off (see the module docstring).
        """
        if not self.enabled:
            return
        from mlflow.entities import Param

        items = [Param(str(k), str(v)[:MAX_PARAM_LENGTH]) for k, v in params.items() if v is not None]
        try:
            for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
                self.client.log_batch(self.run_id, params=items[i:i + MAX_PARAMS_PER_BATCH])
                self.batches_sent += 1
        except Exception as err:  # noqa: BLE001 - tracking never fails the job
            self._fail("log_params", err)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set run tags (mutable, unlike params) in one ``log_batch``."""
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        try:
            self.client.log_batch(self.run_id, tags=[RunTag(str(k), str(v)) for k, v in tags.items() if v is not None])
            self.batches_sent += 1
        except Exception as err:  # noqa: BLE001
            self._fail("set_tags", err)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffer one step's metrics (NaN and infinite values are left out); flush when the buffer is full.

        :param step: the x-axis value (the trainer's PPO iteration, the evaluator's episode index).
        """
        if not self.enabled:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, value in metrics.items():
            if value is None:
                continue
            value = float(value)
            if math.isfinite(value):
                self._metrics.append(Metric(key=str(key), value=value, timestamp=now, step=int(step)))
        self._steps.add(int(step))
        if len(self._steps) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Send the buffered metrics (``log_batch``, at most 1000 per request)."""
        if not self.enabled or not self._metrics:
            self._steps.clear()
            return
        pending, self._metrics = self._metrics, []
        self._steps.clear()
        try:
            for i in range(0, len(pending), MAX_METRICS_PER_BATCH):
                self.client.log_batch(self.run_id, metrics=pending[i:i + MAX_METRICS_PER_BATCH])
                self.batches_sent += 1
        except Exception as err:  # noqa: BLE001
            self._fail("log_batch", err)

    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Upload a local file under the run's artefacts (``artifact_path``: folder inside them)."""
        if not self.enabled:
            return
        try:
            self.client.log_artifact(self.run_id, local_path, artifact_path)
        except Exception as err:  # noqa: BLE001
            self._fail(f"log_artifact {os.path.basename(local_path)}", err)

    def finish(self, status: str = "FINISHED") -> None:
        """Flush, then set the run's status (``FINISHED``, ``FAILED``, ``KILLED``) and end time."""
        self.flush()
        if not self.enabled:
            return
        try:
            self.client.set_terminated(self.run_id, status=status)
        except Exception as err:  # noqa: BLE001
            self._fail("set_terminated", err)


def _flush_every() -> int:
    raw = (os.environ.get(env_vars.MLFLOW_FLUSH_EVERY) or "").strip()
    try:
        value = int(raw) if raw else 10
    except ValueError:
        raise ValueError(f"{env_vars.MLFLOW_FLUSH_EVERY}={raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{env_vars.MLFLOW_FLUSH_EVERY} must be >= 1, got {value}")
    return value


def run_logger_from_env(*, stage: str, run_name: str, tags: Mapping[str, Any] | None = None,
                        environ: Mapping[str, str] | None = None) -> NullRunLogger:
    """The logger for this process's stage (see the module docstring for the variables read).

    :param stage: ``rl_training`` or ``evaluation`` (tag ``sim2real.stage`` of a run created here).
    :param run_name: display name of a run created here (an existing ``MLFLOW_RUN_ID`` keeps its own).
    :param tags: set on the run (e.g. the run key).
    :return: a :class:`RunLogger` on the run, marked RUNNING; a :class:`NullRunLogger` when tracking is off or
        the server could not be reached (printed on stderr).
    :raises ValueError: a tracking URI that is not http(s) or a SageMaker MLflow ARN, or a bad flush interval
        (bad input: the caller reports it like its other settings).
    """
    env = os.environ if environ is None else environ
    uri = (env.get(env_vars.MLFLOW_TRACKING_URI) or "").strip()
    if not uri:
        return NullRunLogger()
    contract.check_tracking_uri(uri)
    flush_every = _flush_every()
    run_id = (env.get(env_vars.MLFLOW_RUN_ID) or "").strip()
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        all_tags = {contract.STAGE_TAG: stage, **{k: v for k, v in (tags or {}).items() if v is not None}}
        if run_id:
            run = client.get_run(run_id)
            client.update_run(run_id, status="RUNNING")
            experiment_id = run.info.experiment_id
        else:
            experiment_id = (env.get(env_vars.MLFLOW_EXPERIMENT_ID) or "").strip()
            if not experiment_id:
                found = client.get_experiment_by_name(contract.DEFAULT_EXPERIMENT_NAME)
                experiment_id = (found.experiment_id if found is not None
                                 else client.create_experiment(contract.DEFAULT_EXPERIMENT_NAME))
            parent = (env.get(env_vars.MLFLOW_PARENT_RUN_ID) or "").strip()
            if parent:
                all_tags[contract.PARENT_RUN_TAG] = parent
            run = client.create_run(experiment_id, run_name=run_name, tags={k: str(v) for k, v in all_tags.items()})
            run_id = run.info.run_id
    except Exception as err:  # noqa: BLE001 - tracking never fails the job
        print(f"{PREFIX} could not open {'run ' + run_id if run_id else 'a run'} on {uri}: {type(err).__name__}: "
              f"{err}; tracking is off for this job", file=sys.stderr, flush=True)
        return NullRunLogger()
    logger = RunLogger(client, run_id, experiment_id=experiment_id, flush_every=flush_every)
    logger.set_tags(all_tags)
    print(f"{PREFIX} logging to run {run_id} (experiment {experiment_id}) on {uri}", flush=True)
    return logger
