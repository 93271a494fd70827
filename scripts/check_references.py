"""Fail when a tracked file cites a document that is not in the repository.

Docstrings, comments, the README and the docs must name what a reader can open: an in-repository module
or document (``sim2real.contract.schemas``, ``docs/architecture.md``) or a public page (the AWS or Airflow
documentation). Design notes, research files and section numbers of documents kept elsewhere are not
readable from a checkout, so a citation such as a section sign with a number, a path under ``/work/``
or the name of a design document kept outside the repository is refused.

Usage: ``python scripts/check_references.py [PATH ...]`` (default: the tracked files under
:data:`ROOTS`). Prints ``path:line: text (why)`` for each finding; exit status 1 when there is one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: What is checked: every tracked file under these paths (text files; binary files are skipped).
ROOTS = ("include", "dags", "plugins", "scripts", "infra", "containers", "docs", "tests", "README.md", "Makefile",
         "pyproject.toml")
#: ``(pattern, why)``: each is a citation of something outside the repository.
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\u00a7"), "section sign: a section of a document outside the repository"),
    (re.compile(r"\bDESIGN\b"), "the design brief is not in the repository"),
    (re.compile(r"\bcontracts\.md\b"), "contracts.md is not in the repository: cite sim2real.contract"),
    (re.compile(r"\bseed-repo\b"), "seed-repo notes are not in the repository"),
    (re.compile(r"\bplatform-facts\b"), "platform-facts notes are not in the repository: cite the AWS page"),
    (re.compile(r"\bairflow-provider\.md\b"), "airflow-provider notes are not in the repository"),
    (re.compile(r"\bseed 0\d\b", re.IGNORECASE), "seed notes are not in the repository"),
    (re.compile(r"(?<![\w.{:-])/work/"), "a path of a working machine, not of the repository"),
)
#: This file names the patterns it refuses.
SELF = Path(__file__).resolve()


def tracked_files(roots: tuple[str, ...] = ROOTS) -> list[Path]:
    """The files git tracks under ``roots`` (plus untracked, not ignored ones: new files are checked too)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *roots],
                         cwd=REPO_ROOT, check=True, capture_output=True, text=True).stdout
    return [REPO_ROOT / line for line in out.splitlines() if line and (REPO_ROOT / line).is_file()]


def findings(path: Path) -> list[str]:
    """``"path:line: text (why)"`` for each citation of an outside document in ``path`` (empty: none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return []  # binary (figures, archives): no text to cite anything
    rel = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, why in PATTERNS:
            if pattern.search(line):
                found.append(f"{rel}:{number}: {line.strip()[:160]} ({why})")
    return found


def main(argv: list[str] | None = None) -> int:
    """Check ``argv`` (paths) or the tracked files; print each finding; return 1 when there is one."""
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a).resolve() for a in args] if args else tracked_files()
    problems = [f for p in paths if p.resolve() != SELF for f in findings(p)]
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} reference(s) to documents outside the repository: name the in-repository module "
              "or document, or the public documentation page, instead", file=sys.stderr)
        return 1
    print(f"references: {len(paths)} files, none outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
