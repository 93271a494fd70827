"""MLflow experiment tracking for the trainer and the evaluator (params, batched metrics, artefacts), never in
the way of the work.

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

**A tracking outage never costs the job time.** Every MLflow call runs on one background thread
(:class:`RunLogger`), fed by a queue: the training loop only appends to it, whatever the server does.

* The MLflow client's own HTTP settings are bounded for the process unless the job's environment sets them
  (:data:`CLIENT_HTTP_DEFAULTS`: ``MLFLOW_HTTP_REQUEST_TIMEOUT`` 5 s per request, instead of 120 s;
  ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` 0, instead of 7 retries with backoff factor 2, about 4 minutes per call;
  the client reads them at every request, ``mlflow.utils.rest_utils.http_request``).
* When the server cannot be reached (connection refused, timeout, HTTP 429/5xx) the call stays queued and is
  retried after 2, 4, 8, 16, then every 30 s; what arrives meanwhile is buffered, up to
  ``SIM2REAL_MLFLOW_BUFFER`` metric batches (default 200); beyond that the oldest metric batch is dropped and
  counted. When the server answers again the backlog is sent, in order, with the metrics' original timestamps.
* A call the server refuses (HTTP 4xx: e.g. a param logged again with another value) is dropped and counted;
  the rest goes on.
* :meth:`RunLogger.finish` waits for the queue while the server answers, at most
  ``SIM2REAL_MLFLOW_CLOSE_TIMEOUT`` seconds (default 30); from the first call during the close that finds the
  server unreachable, the rest is dropped and counted (a job whose server is down ends within one request
  timeout of its work).
* What was not recorded is said three ways: one line on stderr (``[sim2real] mlflow: tracking: 3 metric
  batches (150 values) not recorded (server unreachable since 2026-12-03T10:00:00Z)``); the summary
  (:meth:`RunLogger.summary`) that the trainer puts in the checkpoint manifest and the evaluator in its report
  (``tracking``), from which the DAG's lineage and run note report it; and, when the server answers again,
  the run's tag :data:`NOT_RECORDED_TAG`.

Tracking never decides a job's outcome: training and evaluation go on and write their usual outputs.
``mlflow`` is imported only when tracking is on.
"""

from __future__ import annotations

import collections
import datetime
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
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

#: The MLflow client's HTTP settings (``mlflow.environment_variables``; integers) set for this process when its
#: environment does not set them: one 5 s attempt per request (MLflow's defaults: 120 s timeout, 7 retries with
#: backoff factor 2 and 1 s jitter, minutes per call). Retrying is this module's job (:class:`RunLogger`).
CLIENT_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "5", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0"}
#: Metric batches buffered while the server cannot be reached (``SIM2REAL_MLFLOW_BUFFER``).
BUFFER_ENV = "SIM2REAL_MLFLOW_BUFFER"
DEFAULT_BUFFER = 200
#: Longest wait of :meth:`RunLogger.finish` for the queue, seconds (``SIM2REAL_MLFLOW_CLOSE_TIMEOUT``).
CLOSE_TIMEOUT_ENV = "SIM2REAL_MLFLOW_CLOSE_TIMEOUT"
DEFAULT_CLOSE_TIMEOUT_S = 30.0
#: Pauses before retrying a call the server did not answer, seconds (the last one repeats).
RETRY_PAUSES_S = (2.0, 4.0, 8.0, 16.0, 30.0)
#: The run tag that says what was not recorded (set when the server answers again after losing something).
NOT_RECORDED_TAG = contract.NOT_RECORDED_TAG
#: The kinds of calls counted when they are not recorded (``summary()["not_recorded"]``).
NOT_RECORDED_KINDS = ("metric_batches", "metrics", "params", "tags", "artifacts", "status", "run")


def _utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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

    def summary(self) -> dict[str, Any] | None:
        """What tracking recorded and did not (see :meth:`RunLogger.summary`); ``None``: tracking off."""
        return None


class _Call:
    """One queued MLflow call: ``send(client)`` and what it carries (for the counts when it is not recorded)."""

    __slots__ = ("kind", "what", "send", "counts")

    def __init__(self, kind: str, what: str, send: Callable[[Any], None], counts: Mapping[str, int]) -> None:
        self.kind, self.what, self.send, self.counts = kind, what, send, dict(counts)


def _refused(err: BaseException) -> bool:
    """True when the server answered and refused the call (HTTP 4xx but 429; a missing local file): retrying
    cannot help. Anything else (connection refused or reset, timeout, 429, 5xx) is the server's absence."""
    from mlflow.exceptions import RestException

    if isinstance(err, RestException):  # the server's own JSON error answer
        status = int(err.get_http_status_code())
        return 400 <= status < 500 and status != 429
    return isinstance(err, (FileNotFoundError, IsADirectoryError, PermissionError))


def _timed(method: Callable[..., None]) -> Callable[..., None]:
    """Add the method's duration to ``self.caller_s`` (what the caller spent in tracking, finish aside)."""
    import functools

    @functools.wraps(method)
    def wrapper(self: RunLogger, *args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            method(self, *args, **kwargs)
        finally:
            self.caller_s += time.perf_counter() - started
    return wrapper


class RunLogger(NullRunLogger):
    """Logs into one MLflow run through ``mlflow.MlflowClient``, from a background thread (module docstring).

    Every method returns at once: calls are queued and sent in order by one daemon thread; only
    :meth:`finish` waits, at most ``close_timeout`` seconds.

    :param client: an ``mlflow.MlflowClient`` bound to the tracking server.
    :param run_id: the run logged into (it must exist); ``None`` when ``opener`` creates it.
    :param flush_every: hand the buffered metrics to the sender once this many distinct steps are buffered (>= 1).
    :param opener: first call, ``opener(client) -> (run_id, experiment_id)`` (open or create the run); retried
        like any call while the server cannot be reached; a refusal turns tracking off (every later call counted).
    :param max_pending: metric batches kept while the server cannot be reached (the oldest is dropped beyond).
    :param close_timeout: longest wait of :meth:`finish`, seconds.
    :param tags_on_open: tags set right after the run is opened.
    """

    enabled = True

    def __init__(self, client: Any, run_id: str | None, *, experiment_id: str | None = None, flush_every: int = 10,
                 opener: Callable[[Any], tuple[str, str | None]] | None = None, max_pending: int = DEFAULT_BUFFER,
                 close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S, retry_pauses: tuple[float, ...] = RETRY_PAUSES_S,
                 describe: str | None = None) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.flush_every = max(1, int(flush_every))
        self.max_pending = max(1, int(max_pending))
        self.close_timeout = float(close_timeout)
        self.retry_pauses = tuple(retry_pauses) or (1.0,)
        self.describe = describe or "the tracking server"
        self._metrics: list[Any] = []
        self._steps: set[int] = set()
        #: requests sent (log_batch calls), for the tests and the summary line
        self.batches_sent = 0
        self.not_recorded = {k: 0 for k in NOT_RECORDED_KINDS}
        self.first_unreachable_at: float | None = None
        self.unreachable_since: float | None = None  # the outage going on now (None: the last call got through)
        self.last_error: str | None = None
        self.close_wait_s: float | None = None  # how long finish() waited for the queue, seconds
        self.caller_s = 0.0  # how long the caller spent in log_params/set_tags/log_metrics/log_artifact, seconds
        self._off_reason: str | None = None  # the run could not be opened (refused): nothing is sent
        self._tagged_lost: dict[str, int] | None = None
        self._queue: collections.deque[_Call] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._closed = False
        self._worker: threading.Thread | None = None
        if opener is not None:
            self._enqueue(_Call("run", "open the run", lambda c: self._open(c, opener), {"run": 1}))

    # -- the caller's side: never waits ------------------------------------------------------
    def _enqueue(self, call: _Call) -> None:
        with self._cond:
            if self._closed:
                self._count(call)
                return
            self._queue.append(call)
            self._trim()
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="sim2real-mlflow", daemon=True)
                self._worker.start()
            self._cond.notify_all()

    @_timed
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log ``params`` (values as text, cut to MLflow's 6000 characters) in batches of 100.

        A param already logged with the same value (a resumed job) is accepted by MLflow; a different value
        is refused (dropped and counted, see the module docstring).
        """
        if not self.enabled:
            return
        from mlflow.entities import Param

        items = [Param(str(k), str(v)[:MAX_PARAM_LENGTH]) for k, v in params.items() if v is not None]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            chunk = items[i:i + MAX_PARAMS_PER_BATCH]
            self._enqueue(_Call("params", "log_params", lambda c, chunk=chunk: self._batch(c, params=chunk),
                                {"params": len(chunk)}))

    @_timed
    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set run tags (mutable, unlike params) in one ``log_batch``."""
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        items = [RunTag(str(k), str(v)) for k, v in tags.items() if v is not None]
        if items:
            self._enqueue(_Call("tags", "set_tags", lambda c: self._batch(c, tags=items), {"tags": len(items)}))

    @_timed
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffer one step's metrics (NaN and infinite values are left out, each keeps the time it was logged);
        hand them to the sender when ``flush_every`` steps are buffered.

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
        """Queue the buffered metrics (``log_batch``, at most 1000 per request); does not wait for them."""
        pending, self._metrics = self._metrics, []
        self._steps.clear()
        if not self.enabled or not pending:
            return
        for i in range(0, len(pending), MAX_METRICS_PER_BATCH):
            chunk = pending[i:i + MAX_METRICS_PER_BATCH]
            self._enqueue(_Call("metrics", "log_batch", lambda c, chunk=chunk: self._batch(c, metrics=chunk),
                                {"metric_batches": 1, "metrics": len(chunk)}))

    @_timed
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Upload a local file under the run's artefacts (``artifact_path``: folder inside them). The file must
        stay in place until :meth:`finish` returns."""
        if not self.enabled:
            return
        self._enqueue(_Call("artifacts", f"log_artifact {os.path.basename(local_path)}",
                            lambda c: c.log_artifact(self.run_id, local_path, artifact_path), {"artifacts": 1}))

    def finish(self, status: str = "FINISHED") -> None:
        """Queue the buffered metrics and the run's status (``FINISHED``, ``FAILED``, ``KILLED``, with its end
        time), then wait for the queue: while the server answers, at most ``close_timeout`` s in all (module
        docstring). What is left is counted, and said on stderr. Later calls do nothing."""
        if self._closed or not self.enabled:
            return
        self.flush()
        self._enqueue(_Call("status", f"set_terminated {status}",
                            lambda c: c.set_terminated(self.run_id, status=status), {"status": 1}))
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            worker = self._worker
        started = time.monotonic()
        if worker is not None:
            worker.join(self.close_timeout)
        self.close_wait_s = round(time.monotonic() - started, 2)
        with self._cond:
            self._closed = True
            while self._queue:  # not sent within the close timeout
                self._count(self._queue.popleft())
            if worker is not None and worker.is_alive() and self._inflight is not None:
                self._count(self._inflight)  # a request still waiting for the server: given up
                self._inflight = None
            self._cond.notify_all()
        lost = contract.describe_not_recorded(self.summary())
        if lost:
            print(f"{PREFIX} tracking: {lost} for run {self.run_id or '(not created)'}", file=sys.stderr,
                  flush=True)

    def summary(self) -> dict[str, Any]:
        """``{"mlflow_run_id", "recorded", "not_recorded": {kind: count}, "first_unreachable_at",
        "unreachable_since", "last_error", "caller_s", "close_wait_s"}``: ``recorded`` is True when every call got
        through;
        ``not_recorded`` counts only the kinds with losses (``metric_batches`` and their ``metrics`` values,
        ``params``, ``tags``, ``artifacts``, ``status``: the final status, ``run``: the run could not be opened);
        the times are UTC ISO 8601 (``unreachable_since``: an outage still going on at the end);
        ``caller_s``: seconds the caller spent in the logging methods (the training loop's cost of tracking);
        ``close_wait_s``: how long :meth:`finish` waited for the queue (``None`` before it)."""
        with self._cond:
            lost = {k: v for k, v in self.not_recorded.items() if v}
            return {"mlflow_run_id": self.run_id, "recorded": not lost, "not_recorded": lost,
                    "first_unreachable_at": _utc(self.first_unreachable_at) if self.first_unreachable_at else None,
                    "unreachable_since": _utc(self.unreachable_since) if self.unreachable_since else None,
                    "last_error": self.last_error, "caller_s": round(self.caller_s, 3),
                    "close_wait_s": self.close_wait_s}

    # -- the sender thread --------------------------------------------------------------------
    _inflight: _Call | None = None

    def _trim(self) -> None:
        """Buffer full (more than ``max_pending`` metric batches queued): the oldest go, counted. Under the lock."""
        pending = [c for c in self._queue if c.kind == "metrics"]
        for call in pending[:max(0, len(pending) - self.max_pending)]:
            self._queue.remove(call)
            self._count(call)

    def _count(self, call: _Call) -> None:
        for key, n in call.counts.items():
            self.not_recorded[key] = self.not_recorded.get(key, 0) + n

    def _open(self, client: Any, opener: Callable[[Any], tuple[str, str | None]]) -> None:
        run_id, experiment_id = opener(client)
        self.run_id, self.experiment_id = run_id, experiment_id or self.experiment_id
        print(f"{PREFIX} logging to run {run_id} (experiment {self.experiment_id}) on {self.describe}", flush=True)

    def _batch(self, client: Any, **kwargs: Any) -> None:
        client.log_batch(self.run_id, **kwargs)
        self.batches_sent += 1

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue or self._closed:
                    return
                call = self._inflight = self._queue.popleft()
                off = self._off_reason
            if off is not None:
                with self._cond:
                    self._count(call)
                    self._inflight = None
                continue
            try:
                call.send(self.client)
            except Exception as err:  # noqa: BLE001 - tracking never fails the job
                text = f"{type(err).__name__}: {str(err)[:300]}"
                with self._cond:
                    self._inflight = None
                    self.last_error = text
                    if self._closed:
                        return
                    if _refused(err):
                        self._count(call)
                        if call.kind == "run":
                            self._off_reason = text
                        print(f"{PREFIX} {call.what} refused for run {self.run_id}: {text}"
                              + ("; tracking is off for this job" if call.kind == "run" else "; dropped")
                              + " (the job's other outputs are not affected)", file=sys.stderr, flush=True)
                        continue
                    now = time.time()
                    if self.unreachable_since is None:
                        self.unreachable_since = now
                        self.first_unreachable_at = self.first_unreachable_at or now
                        print(f"{PREFIX} {call.what} failed: {text}; the server is unreachable: buffering up to "
                              f"{self.max_pending} metric batches and retrying (the job goes on)", file=sys.stderr,
                              flush=True)
                    if self._closing:  # one attempt during the close: the rest is given up
                        self._count(call)
                        while self._queue:
                            self._count(self._queue.popleft())
                        return
                    self._queue.appendleft(call)
                    self._trim()
                    pause = self.retry_pauses[min(failures, len(self.retry_pauses) - 1)]
                    failures += 1
                    self._cond.wait(pause)  # woken early by finish(): one more attempt, then the close
                continue
            with self._cond:
                self._inflight = None
                failures = 0
                if self.unreachable_since is not None:
                    print(f"{PREFIX} the server answers again after {time.time() - self.unreachable_since:.0f} s: "
                          "sending the buffered calls", file=sys.stderr, flush=True)
                    self.unreachable_since = None
                lost = {k: v for k, v in self.not_recorded.items() if v}
                tag_due = bool(lost) and lost != self._tagged_lost and self.run_id is not None
            if tag_due:
                self._tag_losses(lost)

    def _tag_losses(self, lost: dict[str, int]) -> None:
        """Say on the run what was not recorded (:data:`NOT_RECORDED_TAG`); best effort."""
        text = contract.describe_not_recorded({**self.summary(), "unreachable_since": None})
        try:
            self.client.set_tag(self.run_id, NOT_RECORDED_TAG, text)
        except Exception:  # noqa: BLE001 - the summary in the manifest/report still says it
            return
        with self._cond:
            self._tagged_lost = lost


def _env_number(env: Mapping[str, str], name: str, default: float, kind: type = int, minimum: float = 1) -> Any:
    raw = (env.get(name) or "").strip()
    try:
        value = kind(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not {'an integer' if kind is int else 'a number'}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _flush_every(env: Mapping[str, str] | None = None) -> int:
    return _env_number(os.environ if env is None else env, env_vars.MLFLOW_FLUSH_EVERY, 10)


def apply_client_http_defaults(environ: Any = None) -> dict[str, str]:
    """Set :data:`CLIENT_HTTP_DEFAULTS` in ``environ`` (default ``os.environ``, where the MLflow client reads them)
    for each one not set there; :return: the values in effect."""
    environ = os.environ if environ is None else environ
    for key, value in CLIENT_HTTP_DEFAULTS.items():
        if not (environ.get(key) or "").strip():
            environ[key] = value
    return {key: environ[key] for key in CLIENT_HTTP_DEFAULTS}


def run_logger_from_env(*, stage: str, run_name: str, tags: Mapping[str, Any] | None = None,
                        environ: Mapping[str, str] | None = None) -> NullRunLogger:
    """The logger for this process's stage (see the module docstring for the variables read); returns at once.

    The run is opened (``MLFLOW_RUN_ID``: marked RUNNING) or created on the logger's background thread, as its
    first call: an unreachable server costs the caller nothing here.

    :param stage: ``rl_training`` or ``evaluation`` (tag ``sim2real.stage`` of a run created here).
    :param run_name: display name of a run created here (an existing ``MLFLOW_RUN_ID`` keeps its own).
    :param tags: set on the run (e.g. the run key).
    :return: a :class:`RunLogger`; a :class:`NullRunLogger` when tracking is off.
    :raises ValueError: a tracking URI that is not http(s) or a SageMaker MLflow ARN, or a bad
        ``SIM2REAL_MLFLOW_FLUSH_EVERY`` / ``SIM2REAL_MLFLOW_BUFFER`` / ``SIM2REAL_MLFLOW_CLOSE_TIMEOUT``
        (bad input: the caller reports it like its other settings).
    """
    env = os.environ if environ is None else environ
    uri = (env.get(env_vars.MLFLOW_TRACKING_URI) or "").strip()
    if not uri:
        return NullRunLogger()
    contract.check_tracking_uri(uri)
    flush_every = _flush_every(env)
    max_pending = _env_number(env, BUFFER_ENV, DEFAULT_BUFFER)
    close_timeout = _env_number(env, CLOSE_TIMEOUT_ENV, DEFAULT_CLOSE_TIMEOUT_S, float, 0)
    apply_client_http_defaults()
    run_id = (env.get(env_vars.MLFLOW_RUN_ID) or "").strip() or None
    experiment_id = (env.get(env_vars.MLFLOW_EXPERIMENT_ID) or "").strip() or None
    parent = (env.get(env_vars.MLFLOW_PARENT_RUN_ID) or "").strip()
    all_tags = {contract.STAGE_TAG: stage, **{k: v for k, v in (tags or {}).items() if v is not None}}
    if parent and not run_id:
        all_tags[contract.PARENT_RUN_TAG] = parent
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
    except Exception as err:  # noqa: BLE001 - e.g. a SageMaker ARN without the plugin: tracking never fails the job
        print(f"{PREFIX} no client for {uri}: {type(err).__name__}: {err}; tracking is off for this job",
              file=sys.stderr, flush=True)
        return NullRunLogger()

    def open_run(c: Any) -> tuple[str, str | None]:
        if run_id:
            c.update_run(run_id, status="RUNNING")
            return run_id, experiment_id or c.get_run(run_id).info.experiment_id
        exp = experiment_id
        if not exp:
            found = c.get_experiment_by_name(contract.DEFAULT_EXPERIMENT_NAME)
            exp = found.experiment_id if found is not None else c.create_experiment(contract.DEFAULT_EXPERIMENT_NAME)
        run = c.create_run(exp, run_name=run_name, tags={k: str(v) for k, v in all_tags.items()})
        return run.info.run_id, exp

    logger = RunLogger(client, run_id, experiment_id=experiment_id, flush_every=flush_every, opener=open_run,
                       max_pending=max_pending, close_timeout=close_timeout, describe=uri)
    logger.set_tags(all_tags)
    return logger
