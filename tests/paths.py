"""Paths of the repository the tests read (the checkout's root, its DAG folder, ...)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DAGS = REPO_ROOT / "dags"
