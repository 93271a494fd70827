"""``make package``'s check, run for real: the bundle is installed the way MWAA installs it (Python 3.12 where
the machine has it, Airflow 3.3.1 and requirements.txt resolved against the MWAA constraints) and loaded.

The first install takes a few minutes (Airflow from the package index); the venv is kept in dist/mwaa-check and
reused by ``make package`` while the requirements and constraints are unchanged.
"""

from __future__ import annotations

import importlib.util
import shutil
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

pytestmark = pytest.mark.package_check

_spec = importlib.util.spec_from_file_location("package_mwaa", REPO_ROOT / "scripts" / "package_mwaa.py")
package_mwaa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package_mwaa)

WORKDIR = REPO_ROOT / "dist" / "mwaa-check"

#: A trigger written against a newer provider: it sets nothing that builds its hook, so on provider 9.34.0
#: (MWAA 3.3.1) ``AwsBaseWaiterTrigger.hook`` stays abstract and the class cannot be instantiated.
ABSTRACT_TRIGGER = '''
from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger


class LeftAbstractTrigger(AwsBaseWaiterTrigger):
    pass
'''


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package_mwaa.build(tmp_path_factory.mktemp("mwaa") / "mwaa")


def test_bundle_installs_and_loads_on_the_mwaa_set(bundle: Path, capsys: pytest.CaptureFixture) -> None:
    package_mwaa.check(bundle, workdir=WORKDIR)
    out = capsys.readouterr().out
    python = package_mwaa.find_python()
    if python is not None:  # MWAA's Python, with Airflow's constraints for the packages the image lacks
        assert "(Python 3.12)" in out and "mwaa-3.3.1-airflow.txt" in (WORKDIR / "requirements.txt").read_text()
    else:
        assert "WARNING: no Python 3.12" in out
    assert "apache-airflow-providers-amazon 9.34.0, boto3 1.43.56, aiobotocore 3.9.0" in out
    assert "trigger classes instantiable" in out
    assert "DAGs: ['sim_to_real', 'sim_to_real_field_data', 'sim_to_real_release', 'sim_to_real_sweeper']" in out


def test_an_abstract_trigger_fails_the_check(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    broken = tmp_path / "mwaa"
    shutil.copytree(bundle, broken)
    with zipfile.ZipFile(broken / "plugins.zip", "a") as zf:
        zf.writestr("sim2real/orchestration/triggers/left_abstract.py", ABSTRACT_TRIGGER)
    with pytest.raises(SystemExit, match="plugins.zip does not load on the MWAA set"):
        package_mwaa.check(broken, workdir=WORKDIR)
    assert "LeftAbstractTrigger: abstract methods ['hook']" in capsys.readouterr().out


def test_a_pin_against_the_mwaa_set_fails_with_the_package_name(bundle: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    broken = tmp_path / "mwaa"
    shutil.copytree(bundle, broken)
    text = (broken / "requirements.txt").read_text()
    (broken / "requirements.txt").write_text(text.replace("apache-airflow-providers-amazon[aiobotocore]\n",
                                                          "apache-airflow-providers-amazon[aiobotocore]==9.39.0\n"))
    with pytest.raises(SystemExit, match="does not resolve against the MWAA constraints"):
        package_mwaa.check(broken, workdir=tmp_path / "check")
    assert "apache-airflow-providers-amazon" in capsys.readouterr().err


def test_every_source_file_compiles_on_python_3_12(tmp_path: Path) -> None:
    """MWAA runs Python 3.12: the DAGs, the plugin and the whole package compile there (syntax only)."""
    import subprocess

    python = package_mwaa.find_python()
    if python is None:
        pytest.skip("no Python 3.12 on this machine (MWAA's Python): the bundle check said so too")
    files = [str(p) for d in ("dags", "plugins", "include", "scripts") for p in (REPO_ROOT / d).rglob("*.py")]
    code = ("import sys\n"
            "for f in sys.argv[1:]: compile(open(f, encoding='utf-8').read(), f, 'exec')\n")
    proc = subprocess.run([python, "-W", "error::SyntaxWarning", "-c", code, *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
