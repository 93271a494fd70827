"""Parse each of botocore's JSON data files once per process (the sandbox and the tests; nothing that ships).

boto3 and botocore cache what they load per session only, and Airflow's AWS hooks and moto make a new session for
nearly every client: each one parses ``endpoints.json`` (about 1 MB) and its service's model, waiters and
paginators again. In the sandbox's process (a DAG run's tasks, moto's backends) and in a test process that is a
third or more of the CPU time of an AWS call. The files do not change while the process runs, and botocore already
hands one parsed copy to every client of a session, which only read it; so one copy per process serves all
sessions alike.
"""

from __future__ import annotations

import threading
from typing import Any

#: Set on the installed ``load_file`` so that a second :func:`parse_once` leaves it as it is.
_MARK = "_sim2real_parse_once"


def parse_once(patcher: Any = None) -> bool:
    """Make ``botocore.loaders.JSONFileLoader.load_file`` parse each file path once in this process.

    :param patcher: a :class:`sim2real.dev.sandbox._core.Patcher` to undo it with (``None``: for the process's life).
    :return: ``True`` when installed now, ``False`` when it already was.
    """
    from botocore import loaders

    if getattr(loaders.JSONFileLoader.load_file, _MARK, False):
        return False
    load_file = loaders.JSONFileLoader.load_file
    parsed: dict[str, Any] = {}
    lock = threading.Lock()

    def load_file_once(self, file_path):
        with lock:
            if file_path in parsed:
                return parsed[file_path]
        data = load_file(self, file_path)
        with lock:
            return parsed.setdefault(file_path, data)

    setattr(load_file_once, _MARK, True)
    if patcher is None:
        loaders.JSONFileLoader.load_file = load_file_once
    else:
        patcher.setattr(loaders.JSONFileLoader, "load_file", load_file_once)
    return True
