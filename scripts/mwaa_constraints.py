#!/usr/bin/env python3
"""Write the MWAA constraints files from an Amazon MWAA image's bill of materials.

The tested set of this project is what the Amazon MWAA image installs. This script derives the pins
from the image's own lists, so moving to another MWAA version is one command per file:

``image``    ``constraints/mwaa-<airflow>.txt``: every Python package of the image, ``name==version``,
             read from the image's ``Python-Packages-BOM.txt`` (aws/amazon-mwaa-docker-images,
             ``images/airflow/<version>/BillOfMaterials/<version>/Python-Packages-BOM.txt``). The BOM is a
             licence listing; each package appears as ``name``, ``version`` and the path of its
             ``<name>-<version>.dist-info`` folder in the image's site-packages, which is what is read here.
             A plain ``name-version`` list (one per line, ``#`` comments) is accepted as well.
``airflow``  ``constraints/mwaa-<airflow>-airflow.txt``: the pins of Apache Airflow's constraints file that
             MWAA resolves ``requirements.txt`` against (the image's ``etc/airflow_constraints.txt``, a copy of
             ``constraints-<airflow>/constraints-3.12.txt``), limited to packages the image does not install
             (those are in the image file already, and the two agree).
``split``    rewrite the project's ``constraints.txt`` (workload, infra and dev pins) without the packages the
             image file pins, so that pip can take both files at once (two ``==`` pins of one package with
             different versions cannot be resolved).

Errors: a BOM in which no package can be read, or a package listed twice with two versions, raises
``SystemExit`` with the names.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import date
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

#: ``.../site-packages/<name>-<version>.dist-info/...`` in the BOM (wheel names use ``_`` for ``-``).
_DIST_INFO = re.compile(r"site-packages/([A-Za-z0-9_.]+?)-([0-9][^/-]*)\.dist-info")
#: ``name-version`` lines of a plain list.
_NAME_VERSION = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.]*?)-([0-9][^\s]*)$")
#: ``name==version`` lines of a constraints file (extras and markers are not used in these files).
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)(\[[^\]]*\])?==([^\s;#]+)")


def canonical(name: str) -> str:
    """PEP 503 normalised project name (``Flask_Login`` → ``flask-login``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_bom(text: str) -> dict[str, str]:
    """Packages of an MWAA image BOM (or a ``name-version`` list): canonical name → version.

    :raises SystemExit: nothing could be read, or a package appears with two versions.
    """
    found: dict[str, set[str]] = {}
    for match in _DIST_INFO.finditer(text):
        found.setdefault(canonical(match.group(1)), set()).add(match.group(2))
    if not found:
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            match = _NAME_VERSION.match(line)
            if match:
                found.setdefault(canonical(match.group(1)), set()).add(match.group(2))
    if not found:
        raise SystemExit("no package found: expected an MWAA Python-Packages-BOM.txt or name-version lines")
    twice = {name: sorted(versions) for name, versions in found.items() if len(versions) > 1}
    if twice:
        raise SystemExit(f"packages listed with more than one version: {twice}")
    return {name: versions.pop() for name, versions in sorted(found.items())}


def read_pins(text: str) -> dict[str, str]:
    """``name==version`` pins of a constraints file: canonical name → version (other lines ignored)."""
    pins = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[canonical(match.group(1))] = match.group(3)
    return pins


def image_constraints(packages: dict[str, str], airflow: str, source: str, today: str) -> str:
    """Text of ``constraints/mwaa-<airflow>.txt``."""
    head = [
        f"# Amazon MWAA {airflow} image: every Python package it installs (Python 3.12), pinned as shipped.",
        f"# Source: {source}",
        f"# Generated {today} by scripts/mwaa_constraints.py image; do not edit by hand.",
        "# The project's tested set: make install / test / demo and CI resolve with this file first.",
    ]
    return "\n".join(head + [f"{name}=={version}" for name, version in packages.items()]) + "\n"


def airflow_constraints(pins: dict[str, str], image: dict[str, str], airflow: str, source: str,
                        today: str) -> str:
    """Text of ``constraints/mwaa-<airflow>-airflow.txt``: Airflow's pins for packages not in the image.

    :raises SystemExit: the image and Airflow's constraints disagree on a package both pin (then MWAA
        itself could not install ``requirements.txt``; regenerate both from the same image).
    """
    differ = {name: (image[name], version) for name, version in pins.items()
              if name in image and image[name] != version}
    if differ:
        raise SystemExit(f"image and Airflow constraints disagree (image, airflow): {differ}")
    head = [
        f"# Apache Airflow's constraints for {airflow} / Python 3.12 as the Amazon MWAA {airflow} image applies them",
        "# to requirements.txt, limited to packages the image does not install (see mwaa-<version>.txt for those).",
        f"# Source: {source}",
        f"# Generated {today} by scripts/mwaa_constraints.py airflow; do not edit by hand.",
        "# Used by `make package`'s check (Python 3.12); some pins have no Python 3.11 build.",
    ]
    rest = [f"{name}=={version}" for name, version in sorted(pins.items()) if name not in image]
    return "\n".join(head + rest) + "\n"


def split_dev(dev_text: str, image: dict[str, str]) -> tuple[str, list[str]]:
    """``constraints.txt`` without the lines of packages the image pins; returns (text, removed names)."""
    kept, removed = [], []
    for line in dev_text.splitlines():
        match = _PIN.match(line.strip())
        if match and canonical(match.group(1)) in image:
            removed.append(canonical(match.group(1)))
            continue
        kept.append(line)
    return "\n".join(kept) + "\n", removed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    img = sub.add_parser("image", help="constraints/mwaa-<airflow>.txt from the image's Python-Packages-BOM.txt")
    img.add_argument("--bom", type=Path, required=True)
    img.add_argument("--source", required=True, help="where the BOM came from (repository, path, commit date)")
    af = sub.add_parser("airflow", help="constraints/mwaa-<airflow>-airflow.txt from the image's airflow_constraints")
    af.add_argument("--constraints", type=Path, required=True)
    af.add_argument("--source", required=True)
    sp = sub.add_parser("split", help="drop the image's packages from constraints.txt")
    sp.add_argument("--dev", type=Path, default=REPO_ROOT / "constraints.txt")
    for p in (img, af, sp):
        p.add_argument("--airflow-version", default="3.3.1")
        p.add_argument("--out-dir", type=Path, default=REPO_ROOT / "constraints")
    args = parser.parse_args(argv)
    today = date.today().isoformat()
    image_file = args.out_dir / f"mwaa-{args.airflow_version}.txt"
    if args.command == "image":
        packages = read_bom(args.bom.read_text(encoding="utf-8", errors="replace"))
        args.out_dir.mkdir(parents=True, exist_ok=True)
        image_file.write_text(image_constraints(packages, args.airflow_version, args.source, today))
        print(f"{image_file}: {len(packages)} packages")
        return
    image = read_pins(image_file.read_text())
    if args.command == "airflow":
        out = args.out_dir / f"mwaa-{args.airflow_version}-airflow.txt"
        out.write_text(airflow_constraints(read_pins(args.constraints.read_text()), image,
                                           args.airflow_version, args.source, today))
        print(f"{out}: written")
    else:
        text, removed = split_dev(args.dev.read_text(), image)
        args.dev.write_text(text)
        print(f"{args.dev}: dropped {len(removed)} pins the image sets: {' '.join(removed)}", file=sys.stderr)


if __name__ == "__main__":
    main()
