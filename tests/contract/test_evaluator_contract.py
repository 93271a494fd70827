"""The evaluator contract: one declaration for the command the DAG sends, the evaluator's parser and the templates
an environment config may bring; a command of another version is refused with both versions named."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

import pytest

from sim2real.contract import evaluator


def _parse(argv):
    parser = argparse.ArgumentParser(prog="sim2real-evaluate")
    evaluator.add_arguments(parser)
    return parser.parse_args(argv)


def _rendered(values):
    """The default template filled as the evaluation stage fills it (values shell-quoted)."""
    quoted = {k: shlex.quote(str(v)) for k, v in values.items()}
    return evaluator.default_template().format(contract_version=evaluator.CONTRACT_VERSION, **quoted)


def test_the_command_and_the_parser_agree_on_every_argument():
    values = {"manifest_uri": "s3://b/runs/k/manifest.json", "checkpoint_uri": "s3://b/runs/k/c.pt",
              "episodes": 7, "seed": 42, "report_uri": "s3://b/runs/k/eval/report.json"}
    argv = shlex.split(_rendered(values))
    assert argv[:3] == ["sim2real-evaluate", "--contract-version", str(evaluator.CONTRACT_VERSION)]
    parsed = vars(_parse(argv[1:]))
    assert {k: parsed[k] for k in values} == values and parsed["contract_version"] == evaluator.CONTRACT_VERSION
    assert evaluator.template_problems(evaluator.default_template()) == []


def test_one_default_per_argument_shared_by_the_parser():
    parsed = _parse(["--manifest-uri", "m", "--report-uri", "r"])
    assert (parsed.episodes, parsed.seed, parsed.checkpoint_uri) == (
        evaluator.DEFAULTS["episodes"], evaluator.DEFAULTS["seed"], None)


def test_a_template_that_drops_an_argument_or_the_version_is_refused():
    old = ("sim2real-evaluate --manifest-uri {manifest_uri} --checkpoint-uri {checkpoint_uri} "
           "--episodes {episodes} --seed {seed} --report-uri {report_uri}")  # written before the contract
    problems = evaluator.template_problems(old)
    assert len(problems) == 1 and "{contract_version}" in problems[0], problems
    dropped = evaluator.default_template().replace(" --seed {seed}", "")
    assert "{seed}" in evaluator.template_problems(dropped)[0]
    assert "{sede}" in evaluator.template_problems(evaluator.default_template() + " {sede}")[0]
    assert evaluator.template_problems(evaluator.default_template() + " --task {task}") == []
    assert "not a str.format template" in evaluator.template_problems("run {oops")[0]


def test_the_evaluator_refuses_a_command_of_another_version_naming_both(capsys):
    from sim2real.workloads.evaluate import main

    other = evaluator.CONTRACT_VERSION + 1
    code = main(["--contract-version", str(other), "--manifest-uri", "s3://b/m.json", "--report-uri", "s3://b/r"])
    assert code == evaluator.EXIT_CONTRACT_MISMATCH
    err = capsys.readouterr().err
    assert f"version {other}" in err and f"version {evaluator.CONTRACT_VERSION}" in err, err


@pytest.mark.parametrize(("code", "stderr", "expected"), [
    (4, "[sim2real] error: the DAG speaks evaluator contract version 2, ...", "evaluator contract mismatch"),
    (2, "sim2real-evaluate: error: unrecognized arguments: --contract-version 1",
     "from before contract version 1"),
    (3, "sha256 mismatch", "sha256 differs"),
    (2, "[sim2real] error: unknown task", None),  # the evaluator's own verdict: its stderr says it
])
def test_what_an_exit_code_means(code, stderr, expected):
    hint = evaluator.failure_hint(code, stderr)
    assert (hint is None) if expected is None else (expected in hint), hint


def test_an_evaluator_from_before_the_contract_fails_as_the_hint_expects():
    """argparse's own refusal of the unknown flag (what an older evaluator prints) is what failure_hint reads."""
    code = ("import argparse, sys\n"
            "p = argparse.ArgumentParser(prog='sim2real-evaluate')\n"
            "[p.add_argument(f) for f in ('--manifest-uri', '--report-uri')]\n"
            "p.parse_args(sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", code, "--contract-version", "1", "--manifest-uri", "m",
                           "--report-uri", "r"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "from before contract version 1" in evaluator.failure_hint(proc.returncode, proc.stderr)
