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
    """Build every stack, attach the cdk-nag AwsSolutions checks and synthesize into the CLI's output folder.

    Only the CDK CLI (``make synth``, ``cdk synth``, ``cdk deploy``) passes cdk.json's context (settings and
    feature flags) to the app; run directly, the app would silently use defaults, so it refuses.
    """
    if not os.environ.get("CDK_OUTDIR"):
        sys.exit("infra/app.py is run by the CDK CLI, which reads cdk.json's context: use `make synth` "
                 "(or `npx cdk synth` in infra/)")
    app = cdk.App()
    build_app(app)
    app.synth()


if __name__ == "__main__":
    main()
