"""Parse each of botocore's JSON data files once per process (the sandbox and the tests; nothing that ships).

boto3 and botocore cache what they load per session only, and Airflow's AWS hooks and moto make a new session for
nearly every client: each one parses ``endpoints.json`` (about 1 MB) and its service's model, waiters and
paginators again. In the sandbox's process (a DAG run's tasks, moto's backends) and in a test process that is a
third or more of the CPU time of an AWS call. The files do not change while the process runs, and botocore already
hands one parsed copy to every client of a session, which only read it; so one copy per process serves all
sessions alike. :func:`list_services_once` does the same for botocore's listing of its data folders, and
:func:`caller_lookup_by_frames` spares the Amazon provider's user-agent caller lookup its source-file reads.
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


#: Set on the installed ``list_available_services`` so that a second :func:`list_services_once` leaves it as it is.
_LIST_MARK = "_sim2real_list_once"


def list_services_once(patcher: Any = None) -> bool:
    """Make ``botocore.loaders.Loader.list_available_services`` walk the data folders once per process for each
    (search paths, file loader, type name).

    botocore caches the list per loader, i.e. per session; every new session walks every service folder again
    (``os.listdir`` and a ``stat`` per service and API version, about 16 ms) the first time it loads a service
    model. The folders do not change while the process runs. Each caller gets its own copy of the sorted list.

    :param patcher: a :class:`sim2real.dev.sandbox._core.Patcher` to undo it with (``None``: for the process's life).
    :return: ``True`` when installed now, ``False`` when it already was.
    """
    from botocore import loaders

    if getattr(loaders.Loader.list_available_services, _LIST_MARK, False):
        return False
    list_available_services = loaders.Loader.list_available_services
    listed: dict[tuple[Any, ...], list[str]] = {}
    lock = threading.Lock()

    def list_available_services_once(self, type_name):
        key = (tuple(self.search_paths), type(self.file_loader), type_name)
        with lock:
            if key in listed:
                return list(listed[key])
        services = list_available_services(self, type_name)
        with lock:
            return list(listed.setdefault(key, list(services)))

    setattr(list_available_services_once, _LIST_MARK, True)
    list_available_services_once.__wrapped__ = list_available_services  # type: ignore[attr-defined]
    if patcher is None:
        loaders.Loader.list_available_services = list_available_services_once
    else:
        patcher.setattr(loaders.Loader, "list_available_services", list_available_services_once)
    return True


#: Set on the installed caller lookups so that a second :func:`caller_lookup_by_frames` leaves them as they are.
_CALLER_MARK = "_sim2real_caller_by_frames"


def caller_lookup_by_frames() -> bool:
    """The Amazon provider's user-agent caller lookup, the same answer without reading source files, for the
    process's life.

    Every AWS hook's client (``AwsGenericHook.conn``) names the operator that called it in its user agent:
    ``_find_operator_class_name`` / ``_find_executor_class_name`` take ``inspect.stack()``, which reads a source line
    for every frame (``linecache``, ``inspect.getmodule`` over every loaded module): about 70 ms per client under a
    deep stack with Airflow, torch and moto loaded, 1.2 s of CPU in one sandbox DAG run. The replacements walk the
    same frames (``sys._getframe``) and return the same names; only the unused source lines are not read. Each
    keeps the provider's own as ``__wrapped__``.

    :return: ``True`` when installed now, ``False`` when it already was.
    """
    import inspect
    import sys

    from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

    if getattr(AwsGenericHook._find_operator_class_name, _CALLER_MARK, False):
        return False

    def frames():
        frame = sys._getframe(1)  # the lookup's own frame, where inspect.stack() starts
        while frame is not None:
            yield frame
            frame = frame.f_back

    def find_operator_class_name(target_function_name: str) -> str | None:
        for frame in frames():
            if frame.f_code.co_name == target_function_name:
                return frame.f_locals["self"].__class__.__name__
        return None

    def find_executor_class_name() -> str | None:
        for frame in frames():
            classes = [name for name, obj in frame.f_globals.items() if inspect.isclass(obj)]
            if "BaseExecutor" in classes:
                return classes[-1]
        return None

    for name, function in (("_find_operator_class_name", find_operator_class_name),
                           ("_find_executor_class_name", find_executor_class_name)):
        setattr(function, _CALLER_MARK, True)
        function.__wrapped__ = getattr(AwsGenericHook, name)  # type: ignore[attr-defined]
        setattr(AwsGenericHook, name, staticmethod(function))
    return True
