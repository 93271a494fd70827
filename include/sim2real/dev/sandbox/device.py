"""An emulated Greengrass core device that does what the deployed components would do.

For each deployment it reads the configuration merge of ``com.sim2real.PolicySetup`` (or any
component that carries one), then, as the real components would on a Jetson:

1. setup: downloads the RL policy (``ModelS3Uri``, the keys the real recipe reads) from sandbox S3,
   verifies its sha256 against ``ModelSha256`` and exports a checkpoint to ONNX
   (``sim2real.edge.setup_component.run_setup`` with the ``Exporter`` the deployment names);
2. inference: serves the ONNX policy with the ZMQ policy server on a free loopback port and
   checks ``ping`` and one ``get_action`` (``sim2real.edge.device_check.check_policy_endpoint``).

The device reports SUCCEEDED only when both work. With :class:`FieldWork` given, a device whose deployment includes
``com.sim2real.FieldUploader`` then works in the field as a robot would: it runs episodes of the real MuJoCo task
with the deployed policy in a world with a domain gap (:mod:`sim2real.dev.sandbox.field_robot`), spools each summary
and uploads it to the artifacts bucket (``field/episodes/<thing>/<episode_id>.json``; with ``RecordData`` on, its data
first, ``field/data/<thing>/<episode_id>.parquet``), in a thread of its own; a
thing named in the sandbox fault ``field_offline`` runs none (a robot offline for the canary window); with the fault
``field_bad_reports`` each robot also uploads an object that is not an episode and a copy of one under another key.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim2real.dev.sandbox._core import PREFIX, log, safe_thread
from sim2real.dev.sandbox.field_robot import DomainGap

#: The component a robot needs to report field episodes (its recipe uploads the spool).
FIELD_UPLOADER = "com.sim2real.FieldUploader"


def _component_merge(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    """The deployment's ``configurationUpdate.merge`` of component ``name`` (``{}``: none)."""
    spec = (deployment.get("components") or {}).get(name) or {}
    merge = (spec.get("configurationUpdate") or {}).get("merge")
    return (json.loads(merge) if isinstance(merge, str) else dict(merge)) if merge else {}


def _merge_config(deployment: dict[str, Any]) -> dict[str, Any]:
    components = deployment.get("components") or {}
    for name in ("com.sim2real.PolicySetup", "com.sim2real.PolicyInference", *components):
        merge = _component_merge(deployment, name)
        if merge:
            return merge
    return {}


@dataclass(frozen=True)
class FieldWork:
    """What the emulated robots do after a deployment: ``episodes`` episodes of ``task_id`` each, in ``gap``'s world,
    uploaded to ``bucket``; robot ``i`` (in the order the things were deployed to) seeds from ``seed + 1000 * i``.

    ``record_data_groups``: thing groups whose robots run with ``com.sim2real.FieldUploader``'s ``RecordData`` on
    (the configuration those robots were set up with); a deployment's merge of that component's configuration
    with ``RecordData`` decides for every robot it reaches."""

    task_id: str
    episodes: int
    bucket: str
    gap: DomainGap = field(default_factory=DomainGap)
    seed: int = 50_000
    record_data_groups: tuple[str, ...] = ()


class PolicyDeviceCheck:
    """``device_check(deployment, thing_name) -> (ok, reason)`` for ``Sandbox(device_check=...)``.

    :param sandbox: the running sandbox (its S3 endpoint serves the checkpoint).
    :param work_dir: per-device component work folders are created under it.
    :param field_work: what the robots do in the field after a successful deployment (``None``: nothing).
    """

    def __init__(self, sandbox: Any, work_dir: str | Path, field_work: FieldWork | None = None):
        self.sandbox = sandbox
        self.work_dir = Path(work_dir)
        self.field_work = field_work
        self._lock = threading.Lock()  # two devices export one at a time (2 cores)
        self._robots: list[str] = []
        self.field_threads: list[threading.Thread] = []

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
        if ok and self.field_work is not None and FIELD_UPLOADER in (deployment.get("components") or {}):
            self.field_threads.append(safe_thread(self._field, f"field-{thing}", deployment, thing, onnx_path, config))
        return ok, ("com.sim2real.PolicyInference: " + reason)

    def _field(self, deployment: dict[str, Any], thing: str, onnx_path: str, config: dict[str, Any]) -> None:
        """One robot's field work for one deployment: run the episodes, spool them, upload the spool."""
        from sim2real.dev.sandbox.field_robot import recording_settings, run_field_episodes
        from sim2real.edge.field_recorder import FieldRecorder, recording_options, upload_spool

        work = self.field_work
        if thing in set(self.sandbox.faults.get("field_offline") or []):
            self.sandbox.events.emit("greengrass", "field", f"robot {thing} is offline: no field episode",
                                     thing=thing, deployment_id=deployment.get("deploymentId"))
            return
        with self._lock:
            if thing not in self._robots:
                self._robots.append(thing)
            index = self._robots.index(thing)
        spool = self.work_dir / thing / "field-spool"
        # the uploader's configuration: its recipe's defaults as this robot has them, then the deployment's merge
        target = str(deployment.get("targetArn") or "")
        options = recording_options({
            "RecordData": any(target.endswith(f":thinggroup/{g}") for g in work.record_data_groups),
            "FieldBucket": work.bucket, **_component_merge(deployment, FIELD_UPLOADER)})
        task, fps = recording_settings(work.task_id) if options["record_data"] else (None, None)
        recorder = FieldRecorder(
            spool, thing_name=thing, model_version=config["ModelSha256"],
            deployment_id=deployment["deploymentId"], model_package_arn=config.get("ModelPackageArn"),
            component_versions={n: c.get("componentVersion") for n, c in deployment["components"].items()},
            task=task, fps=fps, **options)
        outcomes = run_field_episodes(model_path=onnx_path, task_id=work.task_id, episodes=work.episodes,
                                      seed=work.seed + 1000 * index, gap=work.gap, recorder=recorder)
        s3 = self.sandbox.client("s3", internal=True)
        first = sorted(spool.glob("*.json"))[:1]
        result = upload_spool(s3, spool, options["bucket"], options["prefix"], thing_name=thing)
        if self.sandbox.faults.get("field_bad_reports") and first:
            # what a broken uploader or a stray copy leaves beside the episodes: an object that is not an episode, and
            # a copy of the robot's first episode under another key (the reader refuses both, counted by reason)
            from sim2real.contract.field import episodes_prefix

            folder = episodes_prefix("", thing)
            s3.put_object(Bucket=work.bucket, Key=f"{folder}not-an-episode.json", Body=b'{"schema_version": 1')
            s3.copy_object(Bucket=work.bucket, Key=f"{folder}{first[0].stem}-copy.json",
                           CopySource={"Bucket": work.bucket, "Key": f"{folder}{first[0].name}"})
            self.sandbox.events.emit("greengrass", "fault", f"robot {thing} also uploaded a malformed object and a "
                                     "copy of an episode (field_bad_reports)", thing=thing)
        self.sandbox.events.emit(
            "greengrass", "field", f"robot {thing} ran {len(outcomes)} field episode(s) of {work.task_id} "
            f"({sum(outcomes)} succeeded) with deployment {deployment['deploymentId']}; uploaded "
            f"{len(result.uploaded)}" + (" with their data (LeRobot v2.1)" if options["record_data"] else ""),
            thing=thing, deployment_id=deployment["deploymentId"], episodes=len(outcomes), successes=sum(outcomes),
            uploaded=len(result.uploaded), record_data=options["record_data"])

