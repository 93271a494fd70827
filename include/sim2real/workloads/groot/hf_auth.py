"""The Hugging Face token of the GR00T jobs, read when the job starts and kept out of every record.

SageMaker's CreateTrainingJob / CreateProcessingJob ``Environment`` is a plain string map (no reference to a
secret, unlike ECS or AWS Batch ``secrets``): whatever it holds is returned by DescribeTrainingJob and written into
the pipeline definition. The pipeline therefore passes only the secret's *name* (``HF_TOKEN_SECRET_ID``, or an SSM
SecureString's name in ``HF_TOKEN_SSM_PARAMETER``) and the job resolves the value with the execution role
(``secretsmanager:GetSecretValue`` / ``ssm:GetParameter``), handing it to GR00T's process environment only
(``HF_TOKEN``, what ``huggingface_hub`` reads). :func:`redact` masks it in any text the job writes. While the
value is fetched, botocore's DEBUG response-body log line (``botocore.parsers``, which would print the secret) is
held back.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

#: What replaces the token in text the job writes.
MASK = "***"
#: botocore's logger that writes every response body at DEBUG (``Response body: ...``): the secret's value too.
BODY_LOGGERS = ("botocore.parsers",)


@contextlib.contextmanager
def _no_response_bodies() -> Iterator[None]:
    """Keep :data:`BODY_LOGGERS` at INFO or above while a secret is read (restored after)."""
    loggers = [logging.getLogger(name) for name in BODY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.getEffectiveLevel() < logging.INFO:
            lg.setLevel(logging.INFO)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def hf_token(env: Mapping[str, str], session_factory: Callable[[], Any] | None = None) -> str | None:
    """The Hugging Face token: ``HF_TOKEN`` if already set, else Secrets Manager
    (``HF_TOKEN_SECRET_ID``; a JSON secret's ``HF_TOKEN``/``token`` key or the plain string), else SSM
    (``HF_TOKEN_SSM_PARAMETER``, SecureString decrypted), else ``None``.

    :param env: the job's environment.
    :param session_factory: makes a boto3 session (default ``boto3.session.Session``).
    :raises botocore.exceptions.ClientError: the secret or parameter cannot be read (the message names it, never
        its value).
    """
    if env.get("HF_TOKEN"):
        return env["HF_TOKEN"]
    secret_id, parameter = env.get("HF_TOKEN_SECRET_ID"), env.get("HF_TOKEN_SSM_PARAMETER")
    if not secret_id and not parameter:
        return None
    if session_factory is None:
        import boto3

        session_factory = boto3.session.Session
    session = session_factory()
    if secret_id:
        with _no_response_bodies():
            value = session.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"]
        try:
            parsed = json.loads(value)
        except ValueError:
            return value.strip()
        if isinstance(parsed, dict):
            return str(parsed.get("HF_TOKEN") or parsed.get("token") or "") or None
        return str(parsed)
    with _no_response_bodies():
        return session.client("ssm").get_parameter(Name=parameter, WithDecryption=True)["Parameter"]["Value"].strip()


def redact(text: str, token: str | None) -> str:
    """``text`` with every occurrence of ``token`` replaced by :data:`MASK` (unchanged without a token)."""
    return text.replace(token, MASK) if token else text
