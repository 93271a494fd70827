"""Who may talk to the policy server: loopback addresses, api tokens and token files, and the argument
parser of the CLIs that take secrets (stdlib only).

Used by the server at start, by the recipe checks at publish time and by the install step that
resolves the token, none of which should need the server's runtime dependencies.
"""

from __future__ import annotations

import argparse
import ipaddress
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MIN_API_TOKEN_LENGTH = 16


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (``127.0.0.0/8``, ``::1``, with or without
    brackets); False for anything else, including wildcards (``*``, ``0.0.0.0``, ``::``), interface
    names and other host names (what they resolve to can change)."""
    name = str(host).strip().strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_api_token(token: str | None) -> str | None:
    """Validate a configured token; returns it (None or empty = no token).

    Raises:
        ValueError: not a string of at least :data:`MIN_API_TOKEN_LENGTH` characters, or containing
            whitespace.
    """
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) < MIN_API_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise ValueError(f"api_token must be a string of at least {MIN_API_TOKEN_LENGTH} characters without "
                         "whitespace (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    return token


def read_api_token_file(path: str | Path) -> str | None:
    """The token in ``path`` (surrounding whitespace removed); None when the file is empty.

    Raises:
        FileNotFoundError: no such file. PermissionError: the file is accessible by group or others.
        ValueError: see :func:`check_api_token`.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"api token file {p} does not exist (the component's install writes it with "
                                "`python -m sim2real.edge.api_token`; an empty file means no token)")
    mode = p.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionError(f"api token file {p} is accessible by group or others (mode {oct(mode & 0o777)}); "
                              f"run `chmod 600 {p}`")
    return check_api_token(p.read_text().strip() or None)


class StrictArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` for CLIs that handle secrets.

    No abbreviations (``allow_abbrev=False``): ``--api-token X`` is not taken for ``--api-token-file X``.
    Unknown arguments are refused naming only the options (``--name``, without any ``=value``) and the
    count of the other words, so a secret typed on the command line is never echoed into a log.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            options = [a.split("=", 1)[0] for a in extras if a.startswith("-")]
            others = len(extras) - len(options) + sum("=" in a for a in extras if a.startswith("-"))
            hidden = f"{others} value(s), not shown" if others else ""
            named = " ".join(options)
            self.error("unrecognized arguments: " + (f"{named} (and {hidden})" if named and hidden else named or hidden))
        return parsed
