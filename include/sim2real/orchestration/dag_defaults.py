"""Settings both DAGs share (``sim_to_real`` and ``sim_to_real_release``): poll interval, retries, the
nightly schedule's time zone.

Read from the process environment and the Airflow configuration at import (parse) time: no Variable,
Connection or AWS call.
"""

from __future__ import annotations

import datetime as dt
import os

from sim2real.orchestration.config import check_timezone

#: Airflow's ``[logging] namespace_levels`` for the deployments this repository sets up (``make ui``, MWAA through
#: infra/): the Amazon provider's connection wrapper logs "<connection> credentials retrieved from ..." at INFO each
#: time a hook reads its connection, i.e. on every poll of every wait; WARNING keeps its warnings and errors.
NAMESPACE_LEVELS = "airflow.providers.amazon.aws.utils.connection_wrapper=WARNING"

#: Seconds between status polls of every waiting task (``SIM2REAL_POLL_SECONDS``: 30 on AWS; the local
#: sandbox sets 1-2).
POLL = int(os.environ.get("SIM2REAL_POLL_SECONDS", "30"))
#: Seconds between the canary's listings of its robots' field episodes: ten status polls (300 s on AWS: 12
#: ListObjectsV2 per canary robot an hour; episodes arrive over minutes, not seconds).
FIELD_POLL = 10 * POLL
#: First retry delay of every task in seconds (``SIM2REAL_RETRY_DELAY_SECONDS``, default 20), doubled per
#: try up to 10 minutes; the fault replay and the sandbox end-to-end tests set 1.
RETRY_DELAY = int(os.environ.get("SIM2REAL_RETRY_DELAY_SECONDS", "20"))



def schedule_timezone() -> str:
    """IANA time zone of the nightly schedule: the Airflow option ``[sim2real] schedule_timezone``
    (``AIRFLOW__SIM2REAL__SCHEDULE_TIMEZONE``; infra/ sets it on MWAA from the environment config's
    ``schedule_timezone``), default ``UTC``.

    :raises ValueError: not an IANA time zone name (the DAG then fails to import, naming the option).
    """
    from airflow.providers.common.compat.sdk import conf

    value = conf.get("sim2real", "schedule_timezone", fallback="UTC") or "UTC"
    try:
        return check_timezone(value)
    except ValueError as err:
        raise ValueError(f"Airflow option [sim2real] schedule_timezone: {err}") from None


#: ``default_args`` of both DAGs.
DEFAULT_ARGS = {
    "owner": "mlops",
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=RETRY_DELAY),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=10),
    "execution_timeout": dt.timedelta(hours=1),
    # Every AWS operator's client: throttling and transient 5xx are retried with adaptive backoff
    # (botocore retry mode "adaptive"), not turned into task failures.
    "botocore_config": {"retries": {"mode": "adaptive", "max_attempts": 10}},
}


def periodic_dag(*, dagrun_timeout: dt.timedelta, retries: int) -> dict:
    """``@dag`` arguments of a small periodic DAG (``sim_to_real_sweeper``, ``sim_to_real_field_data``; each names
    its own ``schedule``): one run at a time, no catch-up, ``dagrun_timeout``, and :data:`DEFAULT_ARGS` with
    ``retries``."""
    return {"start_date": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "catchup": False, "max_active_runs": 1,
            "dagrun_timeout": dagrun_timeout, "default_args": {**DEFAULT_ARGS, "retries": retries}}
