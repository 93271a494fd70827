"""A fresh Airflow metadata DB (SQLite) without running the migrations again for every Airflow home.

``airflow db migrate`` on an empty SQLite file runs every migration of Airflow 3 in a fresh interpreter: 20 s on an
idle 2-core machine, over a minute on a busy one, and every sandbox run (``make demo``, each end-to-end test, each
fault replay process) starts with one. :func:`migrated_db` runs it once per Airflow release set into a cache folder
and copies the result: the copy is the same file a fresh ``airflow db migrate`` writes (nothing in it depends on the
Airflow home, the DAG folder or the connections; those live in the environment).

The cache is used only when ``SIM2REAL_AIRFLOW_DB_CACHE`` names a folder (the test suite sets it; ``make demo``
migrates as a fresh install would). Several processes may ask at once: one migrates, under a file lock, the others
wait for it and copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

#: Environment variable naming the cache folder (unset or empty: no cache).
CACHE_ENV = "SIM2REAL_AIRFLOW_DB_CACHE"


def release_key() -> str:
    """A key that changes whenever the installed Airflow distributions (core, task SDK, providers) change.

    A provider may bring tables of its own (its DB manager), so every ``apache-airflow*`` distribution counts.
    :return: 16 hex characters.
    """
    versions = sorted(f"{d.metadata['Name'].lower()}=={d.version}" for d in metadata.distributions()
                      if (d.metadata["Name"] or "").lower().startswith("apache-airflow"))
    return hashlib.sha256("\n".join(versions).encode()).hexdigest()[:16]


def _migrate(db_file: Path, env: dict[str, str]) -> None:
    """Run ``airflow db migrate`` on ``db_file`` (SQLite) in a fresh interpreter with ``env``."""
    home = db_file.parent
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, stdout=subprocess.DEVNULL,
                   env={**env, "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db_file}"})


def migrated_db(db_file: Path, env: dict[str, str]) -> bool:
    """Write a freshly migrated Airflow metadata DB to ``db_file`` (SQLite).

    :param db_file: where the DB goes; an existing file is replaced.
    :param env: the environment ``airflow db migrate`` runs with (the Airflow home's settings).
    :return: ``True`` when copied from the cache (:data:`CACHE_ENV`), ``False`` when migrated in place (no cache).
    :raises subprocess.CalledProcessError: the migration failed.
    """
    cache = os.environ.get(CACHE_ENV, "").strip()
    if not cache:
        _migrate(db_file, env)
        return False
    folder = Path(cache)
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / f"airflow-{release_key()}.db"
    if not template.exists():
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process migrates; the others wait here, then copy
            try:
                if not template.exists():
                    work = Path(tempfile.mkdtemp(prefix="migrate-", dir=folder))
                    try:
                        _migrate(work / "airflow.db", env)
                        os.replace(work / "airflow.db", template)  # atomic: never a half-written template
                    finally:
                        shutil.rmtree(work, ignore_errors=True)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    tmp = db_file.with_name(db_file.name + ".part")
    shutil.copyfile(template, tmp)
    os.replace(tmp, db_file)
    return True
