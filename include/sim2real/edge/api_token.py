"""Resolve the policy server's api token at component install time and store it for the Run step.

The inference component's configuration names where the token lives — ``ApiTokenSecretId`` (an AWS
Secrets Manager secret: its ``SecretString``, either the token itself or a JSON object with an
``api_token`` field) or ``ApiTokenSsmParameter`` (an SSM Parameter Store ``SecureString``, decrypted) —
and the Install step runs::

    python -m sim2real.edge.api_token --secret-id ... --ssm-parameter ... --out {work:path}/api_token

which writes the token to ``--out`` with mode 600 (atomically), or an empty file when neither is named
(no token: the server then binds only a loopback address). The Run step passes the file to
``sim2real-policy-server --api-token-file``. Credentials are the core device's token exchange role
(Greengrass provides them to lifecycle scripts); the role must allow ``secretsmanager:GetSecretValue``
or ``ssm:GetParameter`` on that one name.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim2real.edge.security import StrictArgumentParser, check_api_token

log = logging.getLogger(__name__)

SECRET_JSON_FIELD = "api_token"


class ApiTokenError(RuntimeError):
    """The token cannot be resolved (not found, access denied, wrong parameter type, bad value)."""


def resolve_api_token(secret_id: str | None = None, ssm_parameter: str | None = None, *,
                      secretsmanager_client: Any = None, ssm_client: Any = None) -> str | None:
    """Fetch the token from Secrets Manager or SSM Parameter Store; None when neither is named.

    Args:
        secret_id: Secrets Manager secret name or ARN.
        ssm_parameter: SSM parameter name (must be a ``SecureString``).
        secretsmanager_client, ssm_client: boto3 clients (default: new ones for the default region).

    Returns:
        The token, checked by :func:`sim2real.edge.security.check_api_token`.

    Raises:
        ApiTokenError: both or a missing/unreadable source, a plain ``String`` parameter, a binary or
            malformed secret, a token too short.
    """
    secret_id, ssm_parameter = (secret_id or "").strip() or None, (ssm_parameter or "").strip() or None
    if secret_id and ssm_parameter:
        raise ApiTokenError("name either ApiTokenSecretId or ApiTokenSsmParameter, not both")
    if not secret_id and not ssm_parameter:
        return None
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        if secret_id:
            client = secretsmanager_client or boto3.client("secretsmanager")
            value = client.get_secret_value(SecretId=secret_id)
            text = value.get("SecretString")
            if text is None:
                raise ApiTokenError(f"secret {secret_id} has no SecretString (binary secrets are not supported)")
            token = _from_secret_string(text, secret_id)
            source = f"secret {secret_id}"
        else:
            client = ssm_client or boto3.client("ssm")
            param = client.get_parameter(Name=ssm_parameter, WithDecryption=True)["Parameter"]
            if param.get("Type") != "SecureString":
                raise ApiTokenError(f"SSM parameter {ssm_parameter} is a {param.get('Type')}, not a SecureString: "
                                    "store the token encrypted (aws ssm put-parameter --type SecureString ...)")
            token, source = param["Value"].strip(), f"SSM parameter {ssm_parameter}"
    except (ClientError, BotoCoreError) as exc:
        name = secret_id or ssm_parameter
        raise ApiTokenError(f"cannot read the api token from {name}: {exc}. Check that it exists in this region and "
                            "that the core device's token exchange role may read it") from exc
    try:
        checked = check_api_token(token)
    except ValueError as exc:
        raise ApiTokenError(f"the api token in {source} is not usable: {exc}") from exc
    if checked is None:
        raise ApiTokenError(f"{source} holds an empty api token")
    return checked


def _from_secret_string(text: str, secret_id: str) -> str:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError as exc:
            raise ApiTokenError(f"secret {secret_id} looks like JSON but does not parse: {exc}") from exc
        value = doc.get(SECRET_JSON_FIELD) if isinstance(doc, dict) else None
        if not isinstance(value, str):
            raise ApiTokenError(f"secret {secret_id} is a JSON object without a string {SECRET_JSON_FIELD!r} field")
        return value.strip()
    return stripped


def write_token_file(path: str | Path, token: str | None) -> Path:
    """Write ``token`` (or nothing, for None) to ``path`` with mode 600, atomically; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token or "")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI of the inference component's Install step. Exit 0 = file written, 2 = token not resolved."""
    p = StrictArgumentParser(prog="python -m sim2real.edge.api_token", description=__doc__.split("\n")[0])
    p.add_argument("--secret-id", default="", help="Secrets Manager secret name or ARN")
    p.add_argument("--ssm-parameter", default="", help="SSM Parameter Store SecureString name")
    p.add_argument("--out", required=True, help="token file to write (mode 600; empty when no source is named)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        token = resolve_api_token(args.secret_id, args.ssm_parameter)
    except ApiTokenError as exc:
        log.error("%s", exc)
        return 2
    write_token_file(args.out, token)
    if token:
        log.info("api token from %s written to %s (mode 600)", args.secret_id or args.ssm_parameter, args.out)
    else:
        log.info("no api token configured (ApiTokenSecretId and ApiTokenSsmParameter are empty): %s is empty and the "
                 "policy server will bind only a loopback address", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
