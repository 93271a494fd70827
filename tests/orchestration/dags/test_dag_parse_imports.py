"""Parsing a DAG file is cheap: what the dag-processor pays on every parse leaves out the AWS SDK stack and every
data/ML library.

Airflow 3's dag-processor forks a fresh process per parse; its long-lived manager imports, once, the ``airflow.*``
modules each DAG file names at its top level (``[dag_processor] parsing_pre_import_modules``). Measured the way it
runs (:func:`sim2real.dev.bench_parse.processor_parse`): the DAG files parse without importing boto3, botocore,
requests, numpy, matplotlib, torch … themselves; a cold parse (a fresh interpreter) never imports a data/ML library.
"""

from __future__ import annotations

import pytest

from sim2real.dev.bench_parse import PARSE_HEAVY_PACKAGES, PARSE_NEVER_PACKAGES, processor_parse

from tests.paths import DAGS

FILES = ("sim_to_real.py", "sim_to_real_release.py", "sim_to_real_sweeper.py", "sim_to_real_field_data.py")


def _packages(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(names))


@pytest.fixture(scope="module")
def parsed() -> dict:
    return processor_parse([DAGS / name for name in FILES])


@pytest.mark.parametrize("name", FILES)
def test_a_parse_in_the_dag_processor_imports_no_heavy_package(parsed, name):
    result = parsed["files"][str(DAGS / name)]
    assert not result["import_errors"], result["import_errors"]
    assert result["tasks"] > 0
    heavy = _packages(result["new_modules"], PARSE_HEAVY_PACKAGES)
    assert heavy == [], (f"{name}'s parse imports {heavy} itself, on every parse: name the provider module that "
                         "brings them in at the top of the DAG file (the dag-processor pre-imports airflow.* "
                         "modules) or import it inside the task")


def test_no_data_or_ml_library_is_imported_at_parse_time(parsed):
    assert _packages(parsed["all_modules"], PARSE_NEVER_PACKAGES) == []
