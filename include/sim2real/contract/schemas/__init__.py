"""JSON Schemas (draft 2020-12) of the documents the runtimes exchange, and a standard-library loader.

* ``checkpoint_manifest``: ``<output_uri>/manifest.json``, written last by :mod:`sim2real.workloads.train`
  and :mod:`sim2real.workloads.publish`; read by the checkpoint sensor and trigger, the evaluator, the export
  and the run report.
* ``eval_report``: ``runs/<run_key>/eval/report.json``, written by :mod:`sim2real.workloads.evaluate`; read by
  the evaluation stage (the report check and the quality gate), the run report and the lineage.
* ``lineage``: ``runs/<run_key>/lineage.json``, written by the ``write_lineage`` task.
* ``release``: the release record written by the release DAG.
* ``field_episode``: ``<prefix>field/episodes/<thing_name>/<episode_id>.json``, one episode a robot ran, written
  by :mod:`sim2real.edge.field_recorder`; read by :mod:`sim2real.orchestration.field`; both validate it with
  :func:`sim2real.contract.field.errors` (jsonschema, which the robots' venv installs).
* ``field_dataset``: ``<prefix>field/datasets/<dataset_version>/manifest.json``, one version of the field dataset
  (the episodes with recorded data, each data file's sha256), written by
  :mod:`sim2real.orchestration.field_dataset`; read by the GR00T fine-tune's TransformDataset step.

The schemas are package data (``*.schema.json`` beside this module) and are read with
:mod:`importlib.resources`, so they load from a wheel, an unpacked plugins.zip or a checkout alike.
Validation itself needs ``jsonschema`` (installed in the Airflow environment, imported only by
:func:`errors`); nothing here imports a third-party package at import time.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from importlib.abc import Traversable
from typing import Any

#: Every schema this package ships, by name (file ``<name>.schema.json``).
NAMES = ("checkpoint_manifest", "eval_report", "field_dataset", "field_episode", "lineage", "release")


def filename(name: str) -> str:
    """The file name of schema ``name`` (``"<name>.schema.json"``).

    :raises KeyError: ``name`` is not one of :data:`NAMES` (the message lists them).
    """
    if name not in NAMES:
        raise KeyError(f"no JSON schema named {name!r}; known: {', '.join(NAMES)}")
    return f"{name}.schema.json"


def path(name: str) -> Traversable:
    """Where schema ``name`` is (a :class:`pathlib.Path` when the package is on the file system).

    :raises KeyError: unknown name.
    """
    return resources.files(__name__).joinpath(filename(name))


@lru_cache(maxsize=None)
def _text(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


def load(name: str) -> dict[str, Any]:
    """The parsed JSON schema ``name`` (a fresh copy: callers may modify it).

    :param name: one of :data:`NAMES`, e.g. ``"checkpoint_manifest"``.
    :return: the schema document (a dict with ``$schema``, ``$id``, ``type``, ...).
    :raises KeyError: unknown name.
    """
    return copy.deepcopy(_parsed(name))


@lru_cache(maxsize=None)
def _parsed(name: str) -> dict[str, Any]:
    return json.loads(_text(name))


def errors(name: str, document: Any) -> list[str]:
    """Every mismatch between ``document`` and schema ``name``, as ``"<json path>: <message>"``, sorted by path.

    The document is compared as it is written (``json.dumps(document, default=str)`` round trip); formats
    (``date-time``, ...) are checked where ``jsonschema`` has a checker for them.

    :return: an empty list when ``document`` is valid.
    :raises KeyError: unknown name. ImportError: ``jsonschema`` is not installed (it is in the Airflow
        environment and the dev environment, not in the images or on the robots).
    """
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(_parsed(name), format_checker=Draft202012Validator.FORMAT_CHECKER)
    doc = json.loads(json.dumps(document, default=str))
    return [f"{e.json_path}: {e.message}" for e in sorted(validator.iter_errors(doc), key=lambda e: e.json_path)]
