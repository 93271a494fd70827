"""The tested set is the Amazon MWAA 3.3.1 set.

``constraints/mwaa-3.3.1.txt`` is derived from the MWAA image's bill of materials by
``scripts/mwaa_constraints.py``; the dev venv (``make install``) resolves with it first. These tests check the
derivation on a BOM written in the image's format, the pins MWAA 3.3.1 ships, that this venv really runs them,
and that the project's own requirement and constraint files cannot contradict them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

import pytest

from .conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("mwaa_constraints", REPO_ROOT / "scripts" / "mwaa_constraints.py")
mwaa_constraints = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mwaa_constraints)

IMAGE = REPO_ROOT / "constraints" / "mwaa-3.3.1.txt"
AIRFLOW = REPO_ROOT / "constraints" / "mwaa-3.3.1-airflow.txt"

#: Two entries in the image BOM's licence-listing format (name, version, licence, URL, dist-info path, text).
BOM = """This Docker image includes the following third-party software/licensing:
apache-airflow-providers-amazon
9.34.0
Apache-2.0
https://airflow.apache.org/docs/apache-airflow-providers-amazon/9.34.0/changelog.html
/usr/local/airflow/.local/lib/python3.12/site-packages/apache_airflow_providers_amazon-9.34.0.dist-info/licenses/LICENSE
   Apache License
   Version 2.0, January 2004
Flask_Login
0.6.3
MIT
https://github.com/maxcountryman/flask-login
/usr/local/airflow/.local/lib/python3.12/site-packages/Flask_Login-0.6.3.dist-info/LICENSE
Copyright (c) 2011 Matthew Frazier
/usr/local/airflow/.local/lib/python3.12/site-packages/Flask_Login-0.6.3.dist-info/AUTHORS
"""


def test_reads_the_image_bom_format() -> None:
    assert mwaa_constraints.read_bom(BOM) == {"apache-airflow-providers-amazon": "9.34.0", "flask-login": "0.6.3"}


def test_reads_a_name_version_list_and_refuses_ambiguity() -> None:
    assert mwaa_constraints.read_bom("# comment\nboto3-1.43.56\nFlask_Login-0.6.3\n") == {
        "boto3": "1.43.56", "flask-login": "0.6.3"}
    with pytest.raises(SystemExit, match="more than one version"):
        mwaa_constraints.read_bom("boto3-1.43.56\nboto3-1.43.57\n")
    with pytest.raises(SystemExit, match="no package found"):
        mwaa_constraints.read_bom("nothing here\n")


def test_airflow_constraints_must_agree_with_the_image() -> None:
    image = {"boto3": "1.43.56"}
    text = mwaa_constraints.airflow_constraints({"boto3": "1.43.56", "numpy": "2.5.1"}, image, "3.3.1", "src", "d")
    assert "numpy==2.5.1" in text and "boto3==" not in text
    with pytest.raises(SystemExit, match="disagree"):
        mwaa_constraints.airflow_constraints({"boto3": "1.43.99"}, image, "3.3.1", "src", "d")


def test_split_drops_what_the_image_pins() -> None:
    text, removed = mwaa_constraints.split_dev("# head\nboto3==1.43.117\ntorch==2.13.0\n", {"boto3": "1.43.56"})
    assert text == "# head\ntorch==2.13.0\n" and removed == ["boto3"]


def test_image_file_pins_what_mwaa_3_3_1_ships() -> None:
    text = IMAGE.read_text()
    assert "aws/amazon-mwaa-docker-images" in text.splitlines()[1]  # header: the source
    pins = mwaa_constraints.read_pins(text)
    assert len(pins) == 212
    assert {name: pins[name] for name in (
        "apache-airflow", "apache-airflow-task-sdk", "apache-airflow-providers-amazon",
        "apache-airflow-providers-standard", "apache-airflow-providers-common-compat",
        "apache-airflow-providers-common-io", "apache-airflow-providers-common-sql", "boto3", "botocore",
        "aiobotocore", "jsonschema", "pendulum")} == {
        "apache-airflow": "3.3.1", "apache-airflow-task-sdk": "1.3.1", "apache-airflow-providers-amazon": "9.34.0",
        "apache-airflow-providers-standard": "1.17.0", "apache-airflow-providers-common-compat": "1.18.0",
        "apache-airflow-providers-common-io": "1.8.0", "apache-airflow-providers-common-sql": "2.1.0",
        "boto3": "1.43.56", "botocore": "1.43.56", "aiobotocore": "3.9.0", "jsonschema": "4.26.0",
        "pendulum": "3.2.0"}


def test_this_venv_runs_the_mwaa_versions() -> None:
    """Every installed package the MWAA image also ships is at the image's version (the tested set)."""
    image = mwaa_constraints.read_pins(IMAGE.read_text())
    installed = {mwaa_constraints.canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    differ = {n: (installed[n], v) for n, v in image.items() if n in installed and installed[n] != v}
    assert not differ, f"installed vs MWAA image: {differ}"
    assert installed["apache-airflow-providers-amazon"] == "9.34.0"


def test_project_pins_never_contradict_the_mwaa_set() -> None:
    """constraints.txt leaves the image's packages to the image file; requirements.txt pins nothing that
    Airflow 3.3.1's constraints (as MWAA applies them) or the image pin differently."""
    image = mwaa_constraints.read_pins(IMAGE.read_text())
    airflow = mwaa_constraints.read_pins(AIRFLOW.read_text())
    dev = mwaa_constraints.read_pins((REPO_ROOT / "constraints.txt").read_text())
    assert not set(dev) & set(image)
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)(\[[^\]]*\])?==(\S+)", line)
        if match:
            name, version = mwaa_constraints.canonical(match.group(1)), match.group(3)
            assert image.get(name, airflow.get(name, version)) == version, line
