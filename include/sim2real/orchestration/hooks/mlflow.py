"""MLflow tracking server REST API (2.0) from Airflow: experiments and runs, without the ``mlflow`` package.

The MWAA 3.3.1 image ships neither ``mlflow`` nor ``mlflow-skinny`` (its bill of materials), and adding the
client to the environment's requirements would pull ``databricks-sdk``, ``GitPython``, OpenTelemetry pins and
more into every scheduler and worker; the DAG needs only a handful of calls (create the parent and child runs,
close them, read them back), so it speaks MLflow's REST API (``/api/2.0/mlflow/...``, the same routes the
MLflow client uses) with ``requests``, which Airflow already has.

Tracking URIs:

* ``http(s)://host[:port]``: an MLflow tracking server (the local sandbox's ``mlflow server``); no auth.
* a SageMaker managed MLflow ARN (``arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>``):
  requests go to ``https://<region>.experiments.sagemaker.aws`` signed with SigV4 (service
  ``sagemaker-mlflow``; ``sagemaker`` for an ``mlflow-app``) with the ``aws_conn_id`` connection's credentials,
  plus the ``x-mlflow-sm-tracking-server-arn`` routing header (``x-sm-mlflow-app-arn`` for an app): what the
  ``sagemaker-mlflow`` plugin does for the MLflow client (sagemaker_mlflow.auth_provider /
  mlflow_sagemaker_request_header_provider, 0.5.0). The server's version and UI URL come from
  ``DescribeMlflowTrackingServer``.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from airflow.sdk.bases.hook import BaseHook

from sim2real.contract import tracking as contract

API = "/api/2.0/mlflow"


class MlflowApiError(RuntimeError):
    """An MLflow REST call failed: ``status`` (HTTP), ``error_code`` (MLflow's, e.g. RESOURCE_DOES_NOT_EXIST)."""

    def __init__(self, message: str, *, status: int | None = None, error_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class MlflowHook(BaseHook):
    """Calls an MLflow tracking server's REST API.

    :param tracking_uri: ``http(s)://...`` or a SageMaker MLflow ARN (see the module docstring).
    :param aws_conn_id: AWS connection for SigV4 signing and ``DescribeMlflowTrackingServer`` (ARN only).
    :param timeout: seconds per HTTP request (default 10).
    :param retries: attempts on a connection error, HTTP 429 or 5xx (with 1, 2, 4 ... s between them; default 2:
        a call ends within about 21 s whatever the server does).
    :param deadline: ``time.monotonic()`` value after which no call starts or waits any longer (``None``: no
        overall bound; each call still ends within ``retries`` × ``timeout`` plus the pauses). A request's
        timeout is cut to what is left, so a caller's whole conversation stays within it.
    :raises ValueError: a tracking URI that is neither.
    """

    hook_name = "MLflow tracking server"

    def __init__(self, tracking_uri: str, *, aws_conn_id: str | None = "aws_default", timeout: float = 10.0,
                 retries: int = 2, deadline: float | None = None) -> None:
        super().__init__()
        self.deadline = deadline
        self.tracking_uri = contract.check_tracking_uri(tracking_uri)
        self.aws_conn_id = aws_conn_id
        self.timeout = timeout
        self.retries = max(1, retries)
        self._arn = contract.parse_sagemaker_arn(self.tracking_uri) if contract.is_sagemaker_arn(self.tracking_uri) else None
        self._session: Any = None
        self._credentials: Any = None

    # -- transport ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """The REST API's root: the URI itself, or SageMaker MLflow's regional endpoint for an ARN."""
        if self._arn is None:
            return self.tracking_uri.rstrip("/")
        host = "experiments.sagemaker" if self._arn["resource_type"] == "mlflow-tracking-server" else "mlflow.sagemaker"
        if self._arn["resource_type"] == "mlflow-tracking-server":
            return f"https://{self._arn['region']}.{host}.aws"
        return f"https://{host}.{self._arn['region']}.app.aws"

    def _aws_session(self) -> Any:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

        return AwsGenericHook(aws_conn_id=self.aws_conn_id, client_type="sagemaker",
                              region_name=self._arn["region"]).get_session(region_name=self._arn["region"])

    def _headers_and_auth(self, method: str, url: str, body: bytes | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._arn is None:
            return headers
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        if self._credentials is None:
            self._credentials = self._aws_session().get_credentials().get_frozen_credentials()
        arn_header = ("x-mlflow-sm-tracking-server-arn" if self._arn["resource_type"] == "mlflow-tracking-server"
                      else "x-sm-mlflow-app-arn")
        headers[arn_header] = self.tracking_uri
        service = "sagemaker-mlflow" if self._arn["resource_type"] == "mlflow-tracking-server" else "sagemaker"
        request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
        SigV4Auth(self._credentials, service, self._arn["region"]).add_auth(request)
        return dict(request.headers.items())

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             query: dict[str, Any] | None = None) -> dict[str, Any]:
        """One REST call (``path`` below ``/api/2.0/mlflow``); JSON in and out.

        :raises MlflowApiError: with the server's ``error_code`` and message, or the transport error, after the
            retries (connection errors, 429, 5xx); a 4xx is not retried; or when the hook's ``deadline`` passed
            (before an attempt, or during the pause before the next one).
        """
        import requests

        if self._session is None:
            self._session = requests.Session()
        url = f"{self.base_url}{API}{path}" + (f"?{urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        last: str = ""
        for attempt in range(self.retries):
            if attempt:
                pause = 2 ** (attempt - 1)
                if self.deadline is not None and time.monotonic() + pause >= self.deadline:
                    break
                time.sleep(pause)
            timeout = self.timeout
            if self.deadline is not None:
                timeout = min(timeout, self.deadline - time.monotonic())
                if timeout <= 0:
                    break
            try:
                resp = self._session.request(method, url, data=data, timeout=timeout,
                                             headers=self._headers_and_auth(method, url, data))
            except requests.RequestException as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                continue
            try:
                payload = resp.json() if resp.content else {}
            except ValueError:
                payload = {"message": resp.text[:300]}
            if resp.status_code >= 400:
                raise MlflowApiError(f"MLflow {method} {path} on {self.tracking_uri}: HTTP {resp.status_code} "
                                     f"{payload.get('error_code', '')}: {payload.get('message', '')}",
                                     status=resp.status_code, error_code=payload.get("error_code"))
            return payload
        else:
            raise MlflowApiError(f"MLflow {method} {path} on {self.tracking_uri} failed after {self.retries} attempt(s): "
                                 f"{last}; check that the tracking server is running and reachable from the workers")
        raise MlflowApiError(f"MLflow {method} {path} on {self.tracking_uri}: the caller's deadline passed"
                             + (f" (last: {last})" if last else "")
                             + "; check that the tracking server is running and reachable from the workers")

    # -- SageMaker managed MLflow ------------------------------------------------------------
    def describe_server(self) -> dict[str, Any] | None:
        """``DescribeMlflowTrackingServer`` of the ARN (``MlflowVersion``, ``TrackingServerUrl``, status);
        ``None`` for an http(s) URI or an MLflow App (no such call)."""
        if self._arn is None or self._arn["resource_type"] != "mlflow-tracking-server":
            return None
        client = self._aws_session().client("sagemaker")
        return client.describe_mlflow_tracking_server(TrackingServerName=self._arn["name"])

    # -- experiments and runs ----------------------------------------------------------------
    def get_or_create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str:
        """The id of the experiment ``name``, created when missing (with ``tags``); an existing experiment gets
        those of ``tags`` it does not have yet (one it has keeps its value: a person may have changed it)."""
        experiment = None
        try:
            experiment = self.call("GET", "/experiments/get-by-name", query={"experiment_name": name})["experiment"]
        except MlflowApiError as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
        if experiment is None:
            body = {"name": name, "tags": [{"key": k, "value": str(v)} for k, v in (tags or {}).items()]}
            try:
                return self.call("POST", "/experiments/create", body)["experiment_id"]
            except MlflowApiError as err:  # created meanwhile by another run
                if err.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
            experiment = self.call("GET", "/experiments/get-by-name", query={"experiment_name": name})["experiment"]
        have = {t.get("key") for t in experiment.get("tags") or []}
        for key, value in (tags or {}).items():
            if key not in have:
                self.set_experiment_tag(experiment["experiment_id"], key, value)
        return experiment["experiment_id"]

    def set_experiment_tag(self, experiment_id: str, key: str, value: Any) -> None:
        """``experiments/set-experiment-tag``."""
        self.call("POST", "/experiments/set-experiment-tag",
                  {"experiment_id": experiment_id, "key": key, "value": str(value)})

    def create_run(self, experiment_id: str, run_name: str, tags: dict[str, Any]) -> dict[str, Any]:
        """``runs/create`` (status RUNNING, start time now); :return: the run's ``info``."""
        body = {"experiment_id": experiment_id, "run_name": run_name, "start_time": int(time.time() * 1000),
                "tags": [{"key": k, "value": str(v)} for k, v in tags.items() if v is not None]}
        return self.call("POST", "/runs/create", body)["run"]["info"]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """``runs/get``: ``{"info", "data": {"params", "metrics", "tags"}}``."""
        return self.call("GET", "/runs/get", query={"run_id": run_id})["run"]

    def update_run(self, run_id: str, status: str, end_time_ms: int | None = None) -> dict[str, Any]:
        """``runs/update``: set ``status`` (RUNNING, FINISHED, FAILED, KILLED) and, when terminal, the end time."""
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if status != "RUNNING":
            body["end_time"] = end_time_ms if end_time_ms is not None else int(time.time() * 1000)
        return self.call("POST", "/runs/update", body).get("run_info", {})

    def log_batch(self, run_id: str, *, params: dict[str, Any] | None = None, tags: dict[str, Any] | None = None,
                  metrics: list[dict[str, Any]] | None = None) -> None:
        """``runs/log-batch`` (params and tags as text; MLflow's limits: 100 params, 100 tags, 1000 metrics)."""
        batches = (
            ("params", [{"key": k, "value": str(v)[:6000]} for k, v in (params or {}).items() if v is not None], 100),
            ("tags", [{"key": k, "value": str(v)} for k, v in (tags or {}).items() if v is not None], 100),
            ("metrics", list(metrics or []), 1000),
        )
        for key, items, limit in batches:
            for i in range(0, len(items), limit):
                self.call("POST", "/runs/log-batch", {"run_id": run_id, key: items[i:i + limit]})

    def search_runs(self, experiment_id: str, filter_string: str = "", max_results: int = 100) -> list[dict[str, Any]]:
        """``runs/search`` in one experiment (e.g. ``tags.\\`mlflow.parentRunId\\` = '<id>'``)."""
        body = {"experiment_ids": [experiment_id], "filter": filter_string, "max_results": max_results}
        return self.call("POST", "/runs/search", body).get("runs", [])
