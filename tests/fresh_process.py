"""Run a test's DAG runs in a fresh Python process: Airflow reads its configuration (``AIRFLOW_HOME``, the
database) once, at import, so a test that needs an Airflow home of its own drives it in a child interpreter and
reads back the JSON summary the child wrote."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.paths import REPO_ROOT


def run_fresh(argv: list[str], out: Path, timeout: float) -> tuple[Any, str]:
    """Run ``python *argv`` from the repository root, its stdout and stderr into ``out`` with the suffix ``.log``.

    :param out: the JSON file the child writes.
    :param timeout: seconds before the child is killed (``subprocess.TimeoutExpired``).
    :returns: the JSON in ``out`` and the child's whole log.
    :raises AssertionError: the child exited non-zero or wrote no ``out`` (the message is the log's last 8000
        characters).
    """
    log = out.with_suffix(".log")
    with log.open("w") as fh:  # a file, not a pipe: a full pipe would stall the child
        proc = subprocess.run([sys.executable, *argv], stdout=fh, stderr=subprocess.STDOUT, timeout=timeout,
                              cwd=REPO_ROOT)
    text = log.read_text()
    assert proc.returncode == 0 and out.exists(), text[-8000:]
    return json.loads(out.read_text()), text


def drive_fresh(module: str, folder: Path, name: str, timeout: float) -> tuple[Any, str]:
    """:func:`run_fresh` of ``drive(home, out)`` from the module ``module`` (dotted, e.g.
    ``tests.e2e.test_release_dag``), with ``home`` = ``folder/airflow`` and ``out`` = ``folder/<name>.json``."""
    out = folder / f"{name}.json"
    code = f"from {module} import drive; drive({str(folder / 'airflow')!r}, {str(out)!r})"
    return run_fresh(["-c", code], out, timeout)


def run_script(module: str, folder: Path, timeout: float) -> tuple[Any, str]:
    """:func:`run_fresh` of ``python -m <module> --home folder/airflow --json-out folder/out.json`` (a script that
    reads :func:`script_args`)."""
    out = folder / "out.json"
    return run_fresh(["-m", module, "--home", str(folder / "airflow"), "--json-out", str(out)], out, timeout)


def script_args() -> argparse.Namespace:
    """The command line of a script :func:`run_script` runs: ``--home`` (its Airflow home) and ``--json-out`` (its
    summary). Also sets the DAG's waits short (``SIM2REAL_POLL_SECONDS`` and ``SIM2REAL_RETRY_DELAY_SECONDS`` 1 s)
    unless the environment sets them; call it before importing Airflow."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", required=True)
    ap.add_argument("--json-out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("SIM2REAL_POLL_SECONDS", "1")
    os.environ.setdefault("SIM2REAL_RETRY_DELAY_SECONDS", "1")
    return args


def dag_in_fresh_home(home: str, file_name: str, source: str, dag_id: str) -> Any:
    """In a child interpreter, before Airflow is imported: write ``source`` as ``<home>/dags/<file_name>``, make
    ``home`` the Airflow home with that DAGs folder (:func:`sim2real.dev.demo.prepare_airflow_home`: a migrated
    SQLite database) and parse the file with a ``DagBag``, as ``dag.test()`` needs (the DAG of a bundle).

    :return: the DAG ``dag_id``. :raises AssertionError: the file has import errors.
    """
    from sim2real.dev.demo import prepare_airflow_home

    dag_file = Path(home) / "dags" / file_name
    dag_file.parent.mkdir(parents=True, exist_ok=True)
    dag_file.write_text(source)
    prepare_airflow_home(Path(home), {"AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent)})
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]
