"""An emulated Greengrass core device that does what the deployed components would do.

For each deployment it reads the configuration merge of ``com.sim2real.PolicySetup`` (or any
component that carries one), then, as the real components would on a Jetson:

1. setup: downloads the RL policy (``ModelS3Uri``, the keys the real recipe reads) from sandbox S3,
   verifies its sha256 against ``ModelSha256`` and exports a checkpoint to ONNX
   (``sim2real.edge.setup_component.run_setup`` with the ``Exporter`` the deployment names);
2. inference: serves the ONNX policy with the ZMQ policy server on a free loopback port and
   checks ``ping`` and one ``get_action`` (``sim2real.edge.device_check.check_policy_endpoint``).

The device reports SUCCEEDED only when both work.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sim2real.dev.sandbox._core import PREFIX, log


def _merge_config(deployment: dict[str, Any]) -> dict[str, Any]:
    components = deployment.get("components") or {}
    for name in ("com.sim2real.PolicySetup", "com.sim2real.PolicyInference", *components):
        spec = components.get(name) or {}
        merge = (spec.get("configurationUpdate") or {}).get("merge")
        if merge:
            return json.loads(merge) if isinstance(merge, str) else dict(merge)
    return {}


class PolicyDeviceCheck:
    """``device_check(deployment, thing_name) -> (ok, reason)`` for ``Sandbox(device_check=...)``.

    :param sandbox: the running sandbox (its S3 endpoint serves the checkpoint).
    :param work_dir: per-device component work folders are created under it.
    """

    def __init__(self, sandbox: Any, work_dir: str | Path):
        self.sandbox = sandbox
        self.work_dir = Path(work_dir)
        self._lock = threading.Lock()  # two devices export one at a time (2 cores)

    def __call__(self, deployment: dict[str, Any], thing: str) -> tuple[bool, str]:
        from sim2real.edge.device_check import check_policy_endpoint
        from sim2real.edge.setup_component import load_exporter, run_setup

        config = _merge_config(deployment)
        uri, sha = config.get("ModelS3Uri"), config.get("ModelSha256")
        if not uri or not sha:
            return False, "configuration merge has no ModelS3Uri/ModelSha256: nothing to serve"
        try:
            with self._lock:
                marker = run_setup(uri, sha, self.work_dir / thing / "com.sim2real.PolicySetup",
                                   exporter=load_exporter(config.get("Exporter")), build_trt=False,
                                   model_package_arn=config.get("ModelPackageArn"),
                                   s3_client=self.sandbox.client("s3", internal=True))
        except Exception as err:  # noqa: BLE001 - a device reports, it does not raise
            return False, f"com.sim2real.PolicySetup failed: {err}"
        onnx_path = marker["model_path"]
        ok, reason, details = check_policy_endpoint(onnx_path)
        log.info("%s greengrass: device %s served the RL policy %s (from %s): %s %s",
                 PREFIX, thing, onnx_path, uri, reason, details.get("action_shapes"))
        return ok, ("com.sim2real.PolicyInference: " + reason)

