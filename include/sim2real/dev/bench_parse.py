"""``make bench``'s DAG parse rows: what parsing a DAG file costs, measured in fresh interpreters.

:func:`dag_parse_seconds` times a DagBag parse of one file (and the serialization of its DAGs after it) in a fresh
interpreter; :func:`processor_parse` parses files as the Airflow 3 dag-processor does (the manager pre-imports the
``airflow.*`` modules each file names, then the file's own parse) and reports what each parse imported;
:func:`processor_parse_seconds` times that parse, quiet or beside CPU-bound processes. The DAG parse test holds the
DAG files to :data:`PARSE_HEAVY_PACKAGES`. The table and its other rows: :mod:`sim2real.dev.bench`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

_PARSE_SNIPPET = """
import time, sys
t = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
parse_s = time.perf_counter() - t
from airflow.serialization.serialized_objects import DagSerialization
t = time.perf_counter()
for dag in bag.dags.values():  # what the dag-processor does with every DAG it parsed
    DagSerialization.to_dict(dag)
print(parse_s, sum(len(dag.tasks) for dag in bag.dags.values()), time.perf_counter() - t)
"""


def dag_parse_seconds(path: Path, repeats: int = 5) -> dict[str, float]:
    """Median/min seconds to import Airflow and parse ``path`` in a fresh interpreter, ``repeats`` times; and the
    median seconds to serialize the parsed DAGs after it (``DagSerialization.to_dict``, what the dag-processor does
    with every DAG it parsed, and ``dag.test()`` with the DAG it runs).

    :return: ``{"median_s", "min_s", "repeats", "tasks", "serialize_median_s"}``; ``tasks`` is the number of tasks
        the parsed DAGs hold (mapped tasks counted once, task groups' tasks counted each).
    :raises subprocess.CalledProcessError: the file does not parse (import errors).
    """
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    times, tasks, serialize = [], 0, []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _PARSE_SNIPPET, str(path)], capture_output=True, text=True,
                             env=env, check=True)
        seconds, count, serialize_s = out.stdout.strip().splitlines()[-1].split()
        times.append(float(seconds))
        serialize.append(float(serialize_s))
        tasks = int(count)
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats, "tasks": tasks,
            "serialize_median_s": statistics.median(serialize)}


_PROCESSOR_PARSE_SNIPPET = """
import json, logging, sys, time
t0 = time.perf_counter()
import airflow.dag_processing.manager  # what the dag-processor's long-lived manager process has loaded
from airflow.dag_processing.dagbag import DagBag
from airflow.dag_processing.processor import _pre_import_airflow_modules
t1 = time.perf_counter()
paths = sys.argv[1:]
for path in paths:  # the manager pre-imports each file's airflow.* imports before it forks the file's parser
    _pre_import_airflow_modules(path, logging.getLogger("pre-import"))
t2 = time.perf_counter()
out = {"airflow_import_s": t1 - t0, "pre_import_s": t2 - t1, "files": {}}
for path in paths:
    seen, start = set(sys.modules), time.perf_counter()
    bag = DagBag(dag_folder=path)
    out["files"][path] = {"parse_s": time.perf_counter() - start,
                          "tasks": sum(len(dag.tasks) for dag in bag.dags.values()),
                          "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
                          "new_modules": sorted(set(sys.modules) - seen)}
out["all_modules"] = sorted(sys.modules)
print(json.dumps(out))
"""
#: Third-party packages a DAG file's parse must not import itself: the AWS SDK stack (the dag-processor's manager
#: imports it once, through the provider modules the DAG files name: ``[dag_processor] parsing_pre_import_modules``)
#: and the data/ML libraries (only ever imported inside a task).
PARSE_HEAVY_PACKAGES = ("boto3", "botocore", "s3transfer", "requests", "urllib3", "jmespath", "aiobotocore",
                        "numpy", "pandas", "matplotlib", "PIL", "scipy", "torch", "onnx", "onnxruntime",
                        "gymnasium", "mujoco", "mlflow", "zmq", "msgpack", "skrl")
#: Of those, the ones not even a cold parse (fresh interpreter, nothing pre-imported) may import.
PARSE_NEVER_PACKAGES = PARSE_HEAVY_PACKAGES[7:]


def processor_parse(paths: list[Path]) -> dict[str, Any]:
    """Parse ``paths`` in a fresh interpreter the way the Airflow 3 dag-processor does.

    The manager process has Airflow loaded and imports every ``airflow.*`` module a DAG file names at its top
    level before it forks the process that parses that file (``[dag_processor] parsing_pre_import_modules``,
    default on; ``airflow.dag_processing.processor._pre_import_airflow_modules``): what that pre-import loaded is
    free for every parse, what the parse imports itself is paid on every parse.

    :return: ``{"airflow_import_s", "pre_import_s", "files": {path: {"parse_s", "tasks", "import_errors",
        "new_modules"}}, "all_modules"}`` (seconds; ``new_modules``: imported by that file's parse; ``all_modules``:
        every module of the process at the end). Files are parsed one after the other in the one process, so a
        later file's ``new_modules`` leave out what an earlier one loaded.
    :raises subprocess.CalledProcessError: the interpreter failed.
    """
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", _PROCESSOR_PARSE_SNIPPET, *map(str, paths)], capture_output=True,
                         text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def processor_parse_seconds(path: Path, repeats: int = 5, busy: int = 0) -> dict[str, float]:
    """Median/min seconds of :func:`processor_parse` of ``path`` (the parse alone, after the pre-import), each in a
    fresh interpreter, with ``busy`` CPU-bound processes running beside it (0: none).

    :return: ``{"median_s", "min_s", "repeats", "busy"}``.
    """
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        times = [processor_parse([path])["files"][str(path)]["parse_s"] for _ in range(repeats)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats, "busy": busy}


def _parse_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    ours, anchor = results["dag_parse"], results["provider_dag_parse"]
    return [
        (f"DAG parse, dags/sim_to_real.py ({ours['tasks']} tasks; fresh interpreter, median of 5)",
         f"{ours['median_s']:.2f} s"),
        (f"DAG parse, bench/provider_dag.py (plain provider operators, {anchor['tasks']} tasks)",
         f"{anchor['median_s']:.2f} s"),
        ("DAG serialization after the parse (dag-processor, dag.test()), dags/sim_to_real.py, median of 5",
         f"{ours['serialize_median_s']:.2f} s"),
        ("DAG serialization after the parse, bench/provider_dag.py, median of 5",
         f"{anchor['serialize_median_s']:.2f} s"),
    ]
