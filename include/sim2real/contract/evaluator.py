"""The evaluator's interface, versioned: what the Airflow side passes to ``sim2real-evaluate`` on the workstation.

One declaration serves every side of it: the evaluator's argument parser (:func:`add_arguments`), the command the
evaluation stage sends (:func:`default_template`, or a command template of the environment config, checked by
:func:`template_problems`), the SSM document infra/ creates (its parameters and command line) and the form's
defaults. What comes back is the report (schema ``eval_report`` in :mod:`sim2real.contract.schemas`).

**Versions.** The command carries ``--contract-version``; an evaluator of another version refuses it, naming both
versions, and exits :data:`EXIT_CONTRACT_MISMATCH` without evaluating. An evaluator from before version 1 does not
know the flag: argparse exits 2 with ``unrecognized arguments: --contract-version``, which
:func:`failure_hint` turns into the same advice. Bump :data:`CONTRACT_VERSION` when an argument is added or
removed or changes its meaning.

Standard library only (the contract package is installed everywhere).
"""

from __future__ import annotations

import argparse
import string
from dataclasses import dataclass
from typing import Any

#: The evaluator interface's version (the command's ``--contract-version``).
CONTRACT_VERSION = 1
#: The console script on the workstation's PATH (workloads wheel).
EXECUTABLE = "sim2real-evaluate"
VERSION_FLAG = "--contract-version"
#: The ``str.format`` field of a command template that carries :data:`CONTRACT_VERSION`.
VERSION_FIELD = "contract_version"
#: Exit codes of ``sim2real-evaluate``: it ran (whatever the score), bad input (argparse's own code too), the
#: checkpoint's sha256 differs from the manifest's, the command's contract version is not the evaluator's.
EXIT_OK, EXIT_BAD_INPUT, EXIT_SHA_MISMATCH, EXIT_CONTRACT_MISMATCH = 0, 2, 3, 4

#: An s3:// URI of S3's safe key characters, without ``'`` (the SSM document single-quotes every value).
_S3_URI = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9!_.*()/=-]+$"


@dataclass(frozen=True)
class EvaluatorArgument:
    """One argument of ``sim2real-evaluate``.

    :param name: the ``str.format`` field and the Python name (``manifest_uri``).
    :param type: ``str`` or ``int``.
    :param default: None: required (str) or no value (``checkpoint_uri``: the manifest's).
    :param pattern: the SSM document parameter's ``allowedPattern`` (what infra/ lets through).
    """

    name: str
    type: type
    help: str
    pattern: str
    default: Any = None
    required: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def document_parameter(self) -> str:
        """The SSM document's parameter name (camelCase: ``manifestUri``)."""
        head, *rest = self.name.split("_")
        return head + "".join(part.title() for part in rest)


ARGUMENTS: tuple[EvaluatorArgument, ...] = (
    EvaluatorArgument("manifest_uri", str, "the trainer's manifest.json (s3://; the evaluator also reads a local path): "
                      "task, expected sha256",
                      _S3_URI, required=True),
    EvaluatorArgument("checkpoint_uri", str, "the checkpoint to evaluate; default: the manifest's checkpoint_uri",
                      _S3_URI),
    EvaluatorArgument("episodes", int, "episodes to run (>= 1)", r"^[1-9][0-9]{0,4}$", default=100),
    EvaluatorArgument("seed", int, "episode i uses seed + i", r"^[0-9]{1,10}$", default=1000),
    EvaluatorArgument("report_uri", str, "where report.json is written (s3://; the evaluator also writes a local path)",
                      _S3_URI,
                      required=True),
)
#: The arguments by name.
BY_NAME: dict[str, EvaluatorArgument] = {a.name: a for a in ARGUMENTS}
#: The defaults the form and the evaluator share.
DEFAULTS: dict[str, Any] = {a.name: a.default for a in ARGUMENTS if a.default is not None}
#: The fields every command template must use: each argument, and the contract version.
TEMPLATE_FIELDS: tuple[str, ...] = (*(a.name for a in ARGUMENTS), VERSION_FIELD)
#: Fields a command template may use besides: the checkpoint's task (a custom command may need it).
OPTIONAL_TEMPLATE_FIELDS: tuple[str, ...] = ("task",)


def default_template() -> str:
    """The command as a ``str.format`` template over :data:`TEMPLATE_FIELDS` (values are inserted shell-quoted)."""
    return " ".join([EXECUTABLE, VERSION_FLAG, "{" + VERSION_FIELD + "}",
                     *(f"{a.flag} {{{a.name}}}" for a in ARGUMENTS)])


def template_problems(template: str) -> list[str]:
    """What is wrong with an environment config's ``evaluation.command_template``: fields it lacks (the command
    would silently drop an argument, or not name its contract version) or does not know. [] when it is usable."""
    try:
        used = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError as err:
        return [f"it is not a str.format template: {err}"]
    problems = []
    missing = [f for f in TEMPLATE_FIELDS if f not in used]
    if missing:
        problems.append("it does not pass " + ", ".join("{" + f + "}" for f in missing)
                        + f" (every field of the evaluator contract version {CONTRACT_VERSION} must be passed: "
                        + default_template() + ")")
    unknown = sorted(used - set(TEMPLATE_FIELDS) - set(OPTIONAL_TEMPLATE_FIELDS))
    if unknown:
        problems.append("it uses fields the evaluator contract does not have: "
                        + ", ".join("{" + f + "}" for f in unknown))
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The evaluator's arguments, :data:`VERSION_FLAG` included (optional: a person running it by hand may leave
    it out)."""
    parser.add_argument(VERSION_FLAG, type=int, default=None, dest=VERSION_FIELD,
                        help=f"the interface version the caller was built for (this evaluator: {CONTRACT_VERSION})")
    for arg in ARGUMENTS:
        parser.add_argument(arg.flag, type=arg.type, default=arg.default, required=arg.required, help=arg.help)


def version_problem(requested: int | None) -> str | None:
    """The refusal for a command of another contract version (None: the versions agree, or none was given)."""
    if requested is None or requested == CONTRACT_VERSION:
        return None
    return mismatch_text(requested, CONTRACT_VERSION)


def mismatch_text(dag_version: int, evaluator_version: int | str) -> str:
    return (f"the DAG speaks evaluator contract version {dag_version}, the workstation's {EXECUTABLE} version "
            f"{evaluator_version}: install the sim2real workloads package of the DAG's release on the workstation "
            "(or deploy the DAGs that match it), then clear the evaluation")


def failure_hint(exit_code: Any, stderr: str | None) -> str | None:
    """What a failed evaluation command means, from its exit code and stderr, or None when it is the evaluator's
    own verdict on its input (see its stderr)."""
    stderr = stderr or ""
    if str(exit_code) == str(EXIT_CONTRACT_MISMATCH):
        return f"evaluator contract mismatch ({stderr.strip().splitlines()[-1] if stderr.strip() else 'no stderr'})"
    if str(exit_code) == str(EXIT_BAD_INPUT) and "unrecognized arguments" in stderr and VERSION_FLAG in stderr:
        return mismatch_text(CONTRACT_VERSION, f"from before contract version 1 (it does not know {VERSION_FLAG})")
    if str(exit_code) == str(EXIT_SHA_MISMATCH):
        return "the checkpoint's sha256 differs from its manifest's: the checkpoint was changed after training"
    return None
