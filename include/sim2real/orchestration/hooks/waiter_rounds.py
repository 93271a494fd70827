"""Use a custom JSON waiter model as the terminal-state table of a polling round.

Some waits cover several resources at once (every core device of a Greengrass thing group,
every instance of an SSM command) or need the full response after the state is known (the
failing step, a device's reason, a node count). For those our hooks call the API themselves
and classify the response with the *acceptors* of the waiter JSON, so the waiter file stays the
single source of truth for which status is success, failure or "keep polling", exactly as
botocore's own waiter would decide (``botocore.waiter.AcceptorConfig.matcher_func``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

from botocore.waiter import WaiterModel

Outcome = Literal["success", "failure", "retry"]


@lru_cache(maxsize=32)
def _model_json(path: str) -> str:
    with open(path) as f:
        return f.read()


def classify_response(
    waiter_path: str,
    waiter_name: str,
    response: dict[str, Any],
    parameters: dict[str, str] | None = None,
) -> Outcome:
    """Classify one API response with the acceptors of a custom waiter.

    :param waiter_path: path of the waiter JSON (a hook's ``waiter_path``).
    :param waiter_name: the waiter whose acceptors decide.
    :param response: the parsed response of the waiter's ``operation``.
    :param parameters: Jinja parameters of templated acceptor arguments (``{{DEPLOYMENT_ID}}``),
        rendered as ``AwsGenericHook.get_waiter(parameters=...)`` does.
    :return: the state of the first matching acceptor (``success``/``failure``/``retry``), or
        ``retry`` when none matches (botocore's rule).
    :raises KeyError: when the waiter is not in the file.
    """
    from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

    config = json.loads(_model_json(str(waiter_path)))
    config = AwsGenericHook._apply_parameters_value(config, waiter_name, parameters)
    waiter_config = WaiterModel(config).get_waiter(waiter_name)
    for acceptor in waiter_config.acceptors:
        if acceptor.matcher_func(response):
            return acceptor.state  # type: ignore[return-value]
    return "retry"


@lru_cache(maxsize=16)
def _service_waiter_model(service: str) -> WaiterModel:
    import botocore.session

    return botocore.session.get_session().get_waiter_model(service)


def classify_service_response(service: str, waiter_name: str, response: dict[str, Any]) -> Outcome:
    """Classify one API response with the acceptors of one of botocore's own waiters (e.g. ``ssm``
    ``CommandExecuted``), as botocore's waiter would decide.

    :return: the state of the first matching acceptor, or ``retry`` when none matches.
    :raises ValueError: when botocore has no such waiter for ``service``.
    """
    waiter_config = _service_waiter_model(service).get_waiter(waiter_name)
    for acceptor in waiter_config.acceptors:
        if acceptor.matcher_func(response):
            return acceptor.state  # type: ignore[return-value]
    return "retry"
