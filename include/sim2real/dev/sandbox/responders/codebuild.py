"""CodeBuild responder: builds progress through their phases and push a real image manifest to ECR.

moto 5.2.5 flips a build to SUCCEEDED on the first BatchGetBuilds (appending nine phases on every
call) and ignores ``environmentVariablesOverride``. Here StartBuild → ``IN_PROGRESS``; a thread
moves through the phases (SUBMITTED … COMPLETED); at POST_BUILD it puts an image manifest into the
ECR repository (``IMAGE_REPO_NAME`` override, else the sandbox config's repository) with tag
``IMAGE_TAG`` (override, else ``latest``), so DescribeImages returns a real sha256 digest, and exports it
as ``IMAGE_DIGEST`` (``exportedEnvironmentVariables``, as the buildspec's ``env.exported-variables`` does); then
``SUCCEEDED``. ``resolvedSourceVersion`` is set at DOWNLOAD_SOURCE: the started ``sourceVersion`` (for an S3
source, the object version the build was started on; CodeBuild API reference, ``Build.resolvedSourceVersion``).
Fault ``codebuild_fail_phase="BUILD"`` fails that phase (buildStatus FAILED); fault ``codebuild_instant`` runs
the whole build inside StartBuild (it is over before the caller's first read). StopBuild → ``STOPPED``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from moto.codebuild.models import CodeBuildBackend
from moto.codebuild.responses import CodeBuildResponse
from moto.core.responses import ActionResult

from sim2real.dev.sandbox._core import PREFIX, Patcher, active, log, safe_thread

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

PHASES = ["PROVISIONING", "DOWNLOAD_SOURCE", "INSTALL", "PRE_BUILD", "BUILD", "POST_BUILD",
          "UPLOAD_ARTIFACTS", "FINALIZING"]


def _iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class CodeBuildResponder:
    def __init__(self, sandbox: Sandbox, step_seconds: float) -> None:
        self.sandbox = sandbox
        self.step_seconds = step_seconds
        self.builds: dict[str, dict[str, Any]] = {}
        self.stops: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    def install(self, patcher: Patcher) -> None:
        original_start = CodeBuildResponse.start_build

        def start_build(resp: CodeBuildResponse) -> ActionResult:
            result = original_start(resp)
            build = result.result["build"]  # type: ignore[index]
            active().codebuild._accept(build, resp._get_param("environmentVariablesOverride") or [])
            return result

        def batch_get_builds(backend: CodeBuildBackend, ids: list[str]) -> list[dict[str, Any]]:
            return [b for history in backend.build_metadata_history.values() for b in history if b["id"] in ids]

        def stop_build(backend: CodeBuildBackend, build_id: str) -> dict[str, Any] | None:
            return active().codebuild._stop(build_id)

        patcher.setattr(CodeBuildResponse, "start_build", start_build)
        patcher.setattr(CodeBuildBackend, "batch_get_builds", batch_get_builds)
        patcher.setattr(CodeBuildBackend, "stop_build", stop_build)

    def shutdown(self) -> None:
        for event in self.stops.values():
            event.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _accept(self, build: dict[str, Any], env_overrides: list[dict[str, str]]) -> None:
        build_id = build["id"]
        env = {e.get("name"): e.get("value", "") for e in env_overrides}
        build["environment"] = dict(build.get("environment") or {})
        build["environment"]["environmentVariables"] = [
            {"name": k, "value": v, "type": "PLAINTEXT"} for k, v in env.items()]
        group = f"/aws/codebuild/{build['projectName']}"
        stream = build_id.split(":", 1)[1]
        build["logs"] = {"groupName": group, "streamName": stream,
                         "deepLink": f"https://console.aws.amazon.com/cloudwatch/home?region={self.sandbox.region}"
                                     f"#logEvent:group={group};stream={stream}",
                         "cloudWatchLogs": {"status": "ENABLED"}}
        self.builds[build_id] = {"build": build, "env": env}
        self.stops[build_id] = threading.Event()
        self.sandbox.events.emit(
            "codebuild", "build-status", f"build {build_id} IN_PROGRESS (image build emulated: a manifest is pushed, "
            "nothing is compiled)", build_id=build_id, status="IN_PROGRESS",
        )
        self.sandbox.aws_events.codebuild_build(build)
        if self.sandbox.faults.get("codebuild_instant"):
            self._run(build_id, step_seconds=0.0)
            return
        self._threads.append(safe_thread(self._run, f"codebuild-{stream[:8]}", build_id))

    def _log(self, build: dict[str, Any], lines: list[str]) -> None:
        try:
            logs = self.sandbox.client("logs", internal=True)
            group, stream = build["logs"]["groupName"], build["logs"]["streamName"]
            try:
                logs.create_log_group(logGroupName=group)
            except logs.exceptions.ResourceAlreadyExistsException:
                pass
            try:
                logs.create_log_stream(logGroupName=group, logStreamName=stream)
            except logs.exceptions.ResourceAlreadyExistsException:
                pass
            now = int(time.time() * 1000)
            logs.put_log_events(logGroupName=group, logStreamName=stream,
                                logEvents=[{"timestamp": now, "message": m} for m in lines])
        except Exception as exc:  # noqa: BLE001 - logs never change the outcome
            log.warning("%s codebuild log write failed: %s", PREFIX, exc)

    def _run(self, build_id: str, step_seconds: float | None = None) -> None:
        build = self.builds[build_id]["build"]
        try:
            self._run_inner(build_id, build, self.step_seconds if step_seconds is None else step_seconds)
        except Exception as exc:  # noqa: BLE001
            log.exception("%s codebuild emulation crashed", PREFIX)
            self._end(build, "FAULT", f"sandbox error: {exc}")

    def _run_inner(self, build_id: str, build: dict[str, Any], step_seconds: float) -> None:
        stop = self.stops[build_id]
        env = self.builds[build_id]["env"]
        fail_phase = self.sandbox.faults.get("codebuild_fail_phase")
        phases = build["phases"]
        for phase in phases:
            if phase.get("phaseType") == "QUEUED":
                phase.update({"phaseStatus": "SUCCEEDED", "endTime": _iso(), "durationInSeconds": 0})
        for name in PHASES:
            if build["buildStatus"] != "IN_PROGRESS":
                return
            entry = {"phaseType": name, "startTime": _iso()}
            phases.append(entry)
            build["currentPhase"] = name
            if stop.wait(step_seconds):
                entry.update({"phaseStatus": "STOPPED", "endTime": _iso(), "durationInSeconds": 0})
                return
            if name == fail_phase:
                message = f"sandbox fault: COMMAND_EXECUTION_ERROR in phase {name}: Error while executing command. Reason: exit status 1"
                entry.update({"phaseStatus": "FAILED", "endTime": _iso(), "durationInSeconds": 1,
                              "contexts": [{"statusCode": "COMMAND_EXECUTION_ERROR", "message": message}]})
                self._log(build, [f"[Container] Phase {name} failed: {message}"])
                return self._end(build, "FAILED", message)
            if name == "DOWNLOAD_SOURCE" and build.get("sourceVersion"):
                build["resolvedSourceVersion"] = build["sourceVersion"]
            if name == "POST_BUILD":
                digest, uri = self._push(build, env)
                build["exportedEnvironmentVariables"] = [{"name": "IMAGE_DIGEST", "value": digest}]
                self._log(build, [f"[Container] pushed {uri} digest {digest} (emulated)"])
            entry.update({"phaseStatus": "SUCCEEDED", "endTime": _iso(), "durationInSeconds": 1})
        self._end(build, "SUCCEEDED", None)

    def _end(self, build: dict[str, Any], status: str, message: str | None) -> None:
        if build["buildStatus"] != "IN_PROGRESS":
            return
        build["phases"].append({"phaseType": "COMPLETED", "startTime": _iso()})
        build["currentPhase"] = "COMPLETED"
        build["endTime"] = _iso()
        build["buildComplete"] = True
        build["buildStatus"] = status
        self.sandbox.events.emit(
            "codebuild", "build-status", f"build {build['id']} {status}" + (f": {message}" if message else ""),
            build_id=build["id"], status=status,
        )
        self.sandbox.aws_events.codebuild_build(build)

    def _push(self, build: dict[str, Any], env: dict[str, str]) -> tuple[str, str]:
        repo = env.get("IMAGE_REPO_NAME") or self.sandbox.config.get("image_build", {}).get("ecr_repository")
        tag = env.get("IMAGE_TAG") or "latest"
        config_digest = "sha256:" + hashlib.sha256(f"{build['id']}|{build.get('sourceVersion')}".encode()).hexdigest()
        layer_digest = "sha256:" + hashlib.sha256(f"layer|{build['id']}".encode()).hexdigest()
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 1024, "digest": config_digest},
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 4096, "digest": layer_digest}],
        }, separators=(",", ":"))
        ecr = self.sandbox.client("ecr", internal=True)
        image = ecr.put_image(repositoryName=repo, imageManifest=manifest, imageTag=tag,
                              imageManifestMediaType="application/vnd.docker.distribution.manifest.v2+json")["image"]
        digest = image["imageId"]["imageDigest"]
        uri = f"{self.sandbox.account_id}.dkr.ecr.{self.sandbox.region}.amazonaws.com/{repo}:{tag}"
        self.sandbox.events.emit("codebuild", "image", f"pushed {uri} ({digest})", repo=repo, tag=tag, digest=digest)
        return digest, uri

    def _stop(self, build_id: str) -> dict[str, Any] | None:
        entry = self.builds.get(build_id)
        if entry is None:
            return None
        build = entry["build"]
        self.stops[build_id].set()
        self._end(build, "STOPPED", "StopBuild")
        return build
