#!/usr/bin/env python3
"""Entry point of the sim2real CDK app: ``cdk synth`` / ``cdk deploy`` run ``python3 app.py`` here.

Every setting is CDK context (defaults in ``cdk.json``; override with ``-c sim2real:<key>=<value>``);
see :class:`sim2real_infra.settings.Settings`. Synthesis needs no AWS account and no network: the
stacks are environment-agnostic (account and region are CloudFormation pseudo parameters).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aws_cdk as cdk  # noqa: E402

from sim2real_infra.app import build_app  # noqa: E402


def main() -> None:
    """Build every stack, attach the cdk-nag AwsSolutions checks and synthesize ``cdk.out``."""
    # Under the CDK CLI, CDK_OUTDIR names the output folder; run directly (`make synth`), cdk.out/.
    app = cdk.App() if os.environ.get("CDK_OUTDIR") else cdk.App(outdir="cdk.out")
    build_app(app)
    app.synth()


if __name__ == "__main__":
    main()
