"""Greengrass v2 (REST) emulation with one emulated core device per registered thing.

moto 5.2.5 has Greengrass v1 only; every ``greengrassv2`` call 404s. The sandbox registers REST
routes under ``/greengrass/v2/...`` in moto's greengrass URL table and answers:
CreateComponentVersion, DescribeComponent, GetComponent, ListComponents, ListComponentVersions,
CreateDeployment (with ``tags``), GetDeployment (returns them), ListDeployments, CancelDeployment, TagResource
(``POST /tags/{resourceArn}`` with ``{"tags": {...}}``, 200 with an empty body: AWS IoT Greengrass V2 API Reference,
TagResource; deployments only), ListCoreDevices (``thingGroupArn`` filter), GetCoreDevice, ListEffectiveDeployments,
ListInstalledComponents.

Each core device answers a new deployment: QUEUED → IN_PROGRESS → ``device_check(deployment,
thing_name) -> (ok, reason)`` (pluggable; default succeeds) → SUCCEEDED or FAILED. On failure
with ``failureHandlingPolicy`` ROLLBACK (AWS's default) the device goes back to the components
of its previous deployment (recorded in the events). A thing-group deployment stays ``ACTIVE``
(continuous, like AWS); a deployment to a single thing ends ``COMPLETED`` or ``FAILED``.
Faults: ``greengrass_device_fail`` (thing name or list) fails that device's check;
``greengrass_stuck`` leaves devices IN_PROGRESS until CancelDeployment.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlparse

import moto.greengrass.urls as gg_urls

from sim2real.dev.sandbox._core import PREFIX, Patcher, active, log, safe_thread

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

DeviceCheck = Callable[[dict[str, Any], str], "tuple[bool, str]"]
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELED", "REJECTED", "COMPLETED"}

ROUTES = [
    "{0}/greengrass/v2/createComponentVersion$",
    "{0}/greengrass/v2/components$",
    "{0}/greengrass/v2/components/(?P<arn>[^/]+)$",
    "{0}/greengrass/v2/components/(?P<arn>[^/]+)/metadata$",
    "{0}/greengrass/v2/components/(?P<arn>[^/]+)/versions$",
    "{0}/greengrass/v2/deployments$",
    "{0}/greengrass/v2/deployments/(?P<deployment_id>[^/]+)$",
    "{0}/greengrass/v2/deployments/(?P<deployment_id>[^/]+)/cancel$",
    "{0}/greengrass/v2/coreDevices$",
    "{0}/greengrass/v2/coreDevices/(?P<thing>[^/]+)$",
    "{0}/greengrass/v2/coreDevices/(?P<thing>[^/]+)/effectiveDeployments$",
    "{0}/greengrass/v2/coreDevices/(?P<thing>[^/]+)/installedComponents$",
    "{0}/tags/(?P<resource_arn>[^/]+)$",
]


class GreengrassError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _default_check(deployment: dict[str, Any], thing_name: str) -> tuple[bool, str]:
    return True, "emulated device applied the deployment"


def handler(request: Any, full_url: str, headers: Any) -> tuple[int, dict[str, str], str]:
    """moto URL handler for every /greengrass/v2 route (dispatches on method + path)."""
    try:
        sandbox = active()
    except RuntimeError:
        return 404, {}, json.dumps({"message": "no sandbox running"})
    return sandbox.greengrass.dispatch(request, full_url)


class GreengrassResponder:
    def __init__(self, sandbox: Sandbox, device_check: DeviceCheck | None, step_seconds: float) -> None:
        self.sandbox = sandbox
        self.device_check: DeviceCheck = device_check or _default_check
        self.step_seconds = step_seconds
        self.lock = threading.RLock()
        self.components: dict[str, dict[str, dict[str, Any]]] = {}  # name -> version -> record
        self.deployments: dict[str, dict[str, Any]] = {}
        self.devices: dict[str, dict[str, Any]] = {}  # thing -> {groups, status, installed, effective{}}
        self.cancels: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    # -- setup -------------------------------------------------------------------------------
    def install(self, patcher: Patcher) -> None:
        for route in ROUTES:
            patcher.setitem(gg_urls.url_paths, route, handler)

    def shutdown(self) -> None:
        for event in self.cancels.values():
            event.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _arn(self, kind: str, rest: str) -> str:
        return f"arn:aws:greengrass:{self.sandbox.region}:{self.sandbox.account_id}:{kind}:{rest}"

    def thing_group_arn(self, name: str) -> str:
        return f"arn:aws:iot:{self.sandbox.region}:{self.sandbox.account_id}:thinggroup/{name}"

    def register_core_device(self, thing_name: str, thing_groups: list[str]) -> None:
        """Make ``thing_name`` an emulated Greengrass core device in ``thing_groups`` (names)."""
        with self.lock:
            self.devices[thing_name] = {
                "groups": list(thing_groups), "status": "HEALTHY", "updated": time.time(),
                "installed": {}, "effective": {}, "history": [],
            }
        self.sandbox.events.emit("greengrass", "core-device", f"core device {thing_name} registered "
                                 f"(emulated) in {', '.join(thing_groups)}", thing=thing_name)

    def put_component(self, name: str, version: str, recipe: dict[str, Any], publisher: str = "sim2real") -> dict[str, Any]:
        arn = self._arn("components", f"{name}:versions:{version}")
        with self.lock:
            if version in self.components.get(name, {}):
                raise GreengrassError(409, "ConflictException", f"Component {name} version {version} already exists")
            record = {"arn": arn, "componentName": name, "componentVersion": version, "creationTimestamp": time.time(),
                      "publisher": recipe.get("ComponentPublisher", publisher),
                      "description": recipe.get("ComponentDescription", ""), "recipe": recipe,
                      "platforms": [{"name": "linux", "attributes": {"os": "linux"}}]}
            self.components.setdefault(name, {})[version] = record
        return record

    # -- dispatch ------------------------------------------------------------------------------
    def dispatch(self, request: Any, full_url: str) -> tuple[int, dict[str, str], str]:
        parsed = urlparse(full_url)
        parts = [unquote(p) for p in parsed.path.split("/") if p]
        parts = parts if parts[:1] == ["tags"] else parts[2:]  # after greengrass/v2
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        method = request.method
        raw = request.data
        body = json.loads(raw) if raw else {}
        action = "Unknown"
        try:
            action, result, status = self._route(method, parts, query, body)
            internal = "sim2real-sandbox-internal" in (request.headers.get("User-Agent") or "")
            if not internal:
                self.sandbox.requests.record("greengrassv2", action, raw.decode("utf-8", "replace") if raw else parsed.query)
            return status, {"Content-Type": "application/json"}, json.dumps(result, default=str)
        except GreengrassError as exc:
            return exc.status, {"Content-Type": "application/json", "x-amzn-ErrorType": exc.code}, json.dumps(
                {"message": exc.message, "__type": exc.code})
        except Exception as exc:  # noqa: BLE001 - never crash the server thread
            log.exception("%s greengrass %s failed", PREFIX, action)
            return 500, {"Content-Type": "application/json", "x-amzn-ErrorType": "InternalServerException"}, json.dumps(
                {"message": f"sandbox error: {exc}", "__type": "InternalServerException"})

    def _route(self, method: str, parts: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[str, Any, int]:
        head = parts[0] if parts else ""
        if head == "tags" and len(parts) == 2 and method == "POST":
            return "TagResource", self._tag_resource(parts[1], body.get("tags") or {}), 200
        if head == "createComponentVersion" and method == "POST":
            return "CreateComponentVersion", self._create_component_version(body), 201
        if head == "components":
            if len(parts) == 1:
                return "ListComponents", self._list_components(), 200
            arn = parts[1]
            if len(parts) == 3 and parts[2] == "metadata":
                return "DescribeComponent", self._describe_component(arn), 200
            if len(parts) == 3 and parts[2] == "versions":
                return "ListComponentVersions", self._list_component_versions(arn), 200
            if len(parts) == 2:
                record = self._component(arn)
                return "GetComponent", {"recipeOutputFormat": "JSON", "recipe": _b64(json.dumps(record["recipe"])), "tags": {}}, 200
        if head == "deployments":
            if len(parts) == 1 and method == "POST":
                return "CreateDeployment", self._create_deployment(body), 201
            if len(parts) == 1:
                return "ListDeployments", self._list_deployments(query), 200
            if len(parts) == 3 and parts[2] == "cancel" and method == "POST":
                return "CancelDeployment", self._cancel(parts[1]), 200
            if len(parts) == 2:
                return "GetDeployment", self._get_deployment(parts[1]), 200
        if head == "coreDevices":
            if len(parts) == 1:
                return "ListCoreDevices", self._list_core_devices(query), 200
            thing = parts[1]
            device = self.devices.get(thing)
            if device is None:
                raise GreengrassError(404, "ResourceNotFoundException", f"Core device {thing} not found")
            if len(parts) == 2:
                return "GetCoreDevice", self._core_device(thing, full=True), 200
            if parts[2] == "effectiveDeployments":
                with self.lock:
                    items = sorted(device["effective"].values(), key=lambda e: e["creationTimestamp"], reverse=True)
                    return "ListEffectiveDeployments", {"effectiveDeployments": [dict(e) for e in items]}, 200
            if parts[2] == "installedComponents":
                return "ListInstalledComponents", {"installedComponents": list(device["installed"].values())}, 200
        raise GreengrassError(404, "ResourceNotFoundException", f"unknown Greengrass v2 route {method} /{'/'.join(parts)}")

    # -- components ---------------------------------------------------------------------------
    def _create_component_version(self, body: dict[str, Any]) -> dict[str, Any]:
        import base64

        if not body.get("inlineRecipe"):
            raise GreengrassError(400, "ValidationException", "inlineRecipe is required (lambdaFunction is not emulated)")
        text = base64.b64decode(body["inlineRecipe"]).decode("utf-8")
        try:
            recipe = json.loads(text)
        except ValueError:
            import yaml  # PyYAML ships with Airflow

            recipe = yaml.safe_load(text)
        name, version = recipe.get("ComponentName"), recipe.get("ComponentVersion")
        if not name or not version:
            raise GreengrassError(400, "ValidationException", "recipe needs ComponentName and ComponentVersion")
        record = self.put_component(name, version, recipe)
        self.sandbox.events.emit("greengrass", "component", f"component {name} {version} created", component=name, version=version)
        return {"arn": record["arn"], "componentName": name, "componentVersion": version,
                "creationTimestamp": record["creationTimestamp"],
                "status": {"componentState": "DEPLOYABLE", "message": "NONE", "errors": {}}}

    def _component(self, arn: str) -> dict[str, Any]:
        # arn:aws:greengrass:<region>:<acct>:components:<name>:versions:<version>
        pieces = arn.split(":")
        if len(pieces) >= 9 and pieces[7] == "versions":
            record = self.components.get(pieces[6], {}).get(pieces[8])
            if record:
                return record
        raise GreengrassError(404, "ResourceNotFoundException", f"Component version {arn} not found")

    def _describe_component(self, arn: str) -> dict[str, Any]:
        r = self._component(arn)
        return {"arn": r["arn"], "componentName": r["componentName"], "componentVersion": r["componentVersion"],
                "creationTimestamp": r["creationTimestamp"], "publisher": r["publisher"], "description": r["description"],
                "status": {"componentState": "DEPLOYABLE", "message": "NONE", "errors": {}},
                "platforms": r["platforms"], "tags": {}}

    def _list_component_versions(self, arn: str) -> dict[str, Any]:
        name = arn.split(":")[6] if len(arn.split(":")) > 6 else arn
        versions = self.components.get(name)
        if not versions:
            raise GreengrassError(404, "ResourceNotFoundException", f"Component {arn} not found")
        return {"componentVersions": [{"componentName": name, "componentVersion": v, "arn": r["arn"]}
                                      for v, r in sorted(versions.items(), reverse=True)]}

    def _list_components(self) -> dict[str, Any]:
        items = []
        for name, versions in self.components.items():
            latest = sorted(versions)[-1]
            r = versions[latest]
            items.append({"arn": self._arn("components", name), "componentName": name, "latestVersion": {
                "arn": r["arn"], "componentVersion": latest, "creationTimestamp": r["creationTimestamp"],
                "description": r["description"], "publisher": r["publisher"], "platforms": r["platforms"]}})
        return {"components": items}

    # -- deployments ---------------------------------------------------------------------------
    def _targets(self, target_arn: str) -> list[str]:
        if ":thinggroup/" in target_arn:
            group = target_arn.rsplit("/", 1)[-1]
            return [t for t, d in self.devices.items() if group in d["groups"]]
        if ":thing/" in target_arn:
            thing = target_arn.rsplit("/", 1)[-1]
            return [thing] if thing in self.devices else []
        raise GreengrassError(400, "ValidationException", f"targetArn must be a thing or thing group ARN: {target_arn}")

    def _create_deployment(self, body: dict[str, Any]) -> dict[str, Any]:
        target = body.get("targetArn")
        if not target:
            raise GreengrassError(400, "ValidationException", "targetArn is required")
        for name, spec in (body.get("components") or {}).items():
            if spec.get("componentVersion") not in self.components.get(name, {}):
                raise GreengrassError(400, "ValidationException",
                                      f"component {name} version {spec.get('componentVersion')} does not exist")
        token = body.get("clientToken")
        with self.lock:
            # CreateDeployment's clientToken: a request sent again with the same token is processed once (the first
            # deployment's ids are returned; AWS IoT Greengrass V2 API Reference, CreateDeployment)
            for earlier in self.deployments.values():
                if token and earlier.get("clientToken") == token:
                    return {"deploymentId": earlier["deploymentId"], "iotJobId": earlier["iotJobId"],
                            "iotJobArn": earlier["iotJobArn"]}
        things = self._targets(target)
        deployment_id = str(uuid.uuid4())
        job_id = str(uuid.uuid4())
        now = time.time()
        with self.lock:
            for other in self.deployments.values():
                if other["targetArn"] == target and other["isLatestForTarget"]:
                    other["isLatestForTarget"] = False
                    if other["deploymentStatus"] == "ACTIVE":
                        other["deploymentStatus"] = "INACTIVE"
            revision = 1 + sum(1 for d in self.deployments.values() if d["targetArn"] == target)
            deployment = {
                "targetArn": target, "revisionId": str(revision), "deploymentId": deployment_id,
                "deploymentName": body.get("deploymentName") or f"Deployment for {target.rsplit('/', 1)[-1]}",
                "deploymentStatus": "ACTIVE", "iotJobId": job_id,
                "iotJobArn": f"arn:aws:iot:{self.sandbox.region}:{self.sandbox.account_id}:job/{job_id}",
                "components": body.get("components") or {}, "deploymentPolicies": body.get("deploymentPolicies") or {},
                "iotJobConfiguration": body.get("iotJobConfiguration") or {}, "creationTimestamp": now,
                "isLatestForTarget": True, "tags": body.get("tags") or {},
            }
            if body.get("parentTargetArn"):
                deployment["parentTargetArn"] = body["parentTargetArn"]
            if token:
                deployment["clientToken"] = token
            self.deployments[deployment_id] = deployment
            self.cancels[deployment_id] = threading.Event()
            for thing in things:
                self.devices[thing]["effective"][deployment_id] = {
                    "deploymentId": deployment_id, "deploymentName": deployment["deploymentName"], "iotJobId": job_id,
                    "iotJobArn": deployment["iotJobArn"], "targetArn": target, "coreDeviceExecutionStatus": "QUEUED",
                    "reason": "", "creationTimestamp": now, "modifiedTimestamp": now,
                    "statusDetails": {"errorStack": [], "errorTypes": []},
                }
        self.sandbox.events.emit(
            "greengrass", "deployment", f"deployment {deployment_id} ({deployment['deploymentName']}) to {target}: "
            f"{', '.join(things) or 'no core devices'}", deployment_id=deployment_id, things=things,
        )
        for thing in things:
            self._threads.append(safe_thread(self._device, f"gg-{thing}", deployment_id, thing))
        if not things and ":thing/" in target:
            deployment["deploymentStatus"] = "FAILED"
        return {"deploymentId": deployment_id, "iotJobId": job_id, "iotJobArn": deployment["iotJobArn"]}

    def _set_device(self, deployment_id: str, thing: str, status: str, reason: str = "",
                    error_types: list[str] | None = None) -> None:
        with self.lock:
            entry = self.devices[thing]["effective"][deployment_id]
            if entry["coreDeviceExecutionStatus"] in TERMINAL:
                return
            entry.update({"coreDeviceExecutionStatus": status, "reason": reason, "modifiedTimestamp": time.time()})
            if error_types:
                entry["statusDetails"] = {"errorStack": ["DEPLOYMENT_FAILURE", *error_types], "errorTypes": error_types}
        self.sandbox.events.emit("greengrass", "device-status", f"device {thing} deployment {deployment_id} {status}"
                                 + (f": {reason}" if reason else ""), deployment_id=deployment_id, thing=thing, status=status)
        self.sandbox.aws_events.greengrass_device(deployment_id, thing, status, reason, entry.get("statusDetails"))
        self._maybe_finish(deployment_id)

    def _maybe_finish(self, deployment_id: str) -> None:
        with self.lock:
            deployment = self.deployments[deployment_id]
            if ":thing/" not in deployment["targetArn"] or deployment["deploymentStatus"] != "ACTIVE":
                return
            states = [d["effective"][deployment_id]["coreDeviceExecutionStatus"]
                      for d in self.devices.values() if deployment_id in d["effective"]]
            if states and all(s in TERMINAL for s in states):
                deployment["deploymentStatus"] = "COMPLETED" if all(s == "SUCCEEDED" for s in states) else "FAILED"

    def _device(self, deployment_id: str, thing: str) -> None:
        cancel = self.cancels[deployment_id]
        deployment = self.deployments[deployment_id]
        try:
            if cancel.wait(self.step_seconds):
                return
            self._set_device(deployment_id, thing, "IN_PROGRESS")
            faults = self.sandbox.faults
            # greengrass_stuck: True (every device) or a thing name / list of them: IN_PROGRESS until cancelled.
            stuck = faults.get("greengrass_stuck")
            if stuck is True or thing in ({stuck} if isinstance(stuck, str) else set(stuck or [])):
                cancel.wait()
                return
            failing = faults.get("greengrass_device_fail")
            failing = {failing} if isinstance(failing, str) else set(failing or [])
            if thing in failing:
                ok, reason = False, "sandbox fault: component com.sim2real.PolicyInference is BROKEN (exit code 1)"
            else:
                ok, reason = self.device_check(json.loads(json.dumps(deployment, default=str)), thing)
            if cancel.is_set():
                return
            if ok:
                with self.lock:
                    device = self.devices[thing]
                    device["history"].append((deployment_id, dict(device["installed"])))
                    device["installed"] = {
                        name: {"componentName": name, "componentVersion": spec.get("componentVersion"),
                               "lifecycleState": "RUNNING", "isRoot": True, "lastStatusChangeTimestamp": time.time(),
                               "lastReportedTimestamp": time.time(), "lastInstallationSource": deployment_id}
                        for name, spec in deployment["components"].items()}
                self._set_device(deployment_id, thing, "SUCCEEDED", reason if reason else "")
            else:
                policy = deployment["deploymentPolicies"].get("failureHandlingPolicy", "ROLLBACK")
                if policy == "ROLLBACK":
                    with self.lock:
                        previous = self.devices[thing]["history"][-1][0] if self.devices[thing]["history"] else None
                    self.sandbox.events.emit(
                        "greengrass", "rollback", f"device {thing} rolled back after deployment {deployment_id} failed"
                        f" (back to {previous or 'no previous deployment'})", deployment_id=deployment_id, thing=thing,
                        previous=previous)
                self._set_device(deployment_id, thing, "FAILED", reason or "device check failed",
                                 ["COMPONENT_BROKEN"])
        except Exception as exc:  # noqa: BLE001
            log.exception("%s greengrass device %s crashed", PREFIX, thing)
            self._set_device(deployment_id, thing, "FAILED", f"sandbox error: {exc}")

    def _get_deployment(self, deployment_id: str) -> dict[str, Any]:
        with self.lock:
            deployment = self.deployments.get(deployment_id)
            if deployment is None:
                raise GreengrassError(404, "ResourceNotFoundException", f"Deployment {deployment_id} not found")
            return {k: v for k, v in deployment.items() if k != "clientToken"}  # GetDeployment does not return it

    def _tag_resource(self, resource_arn: str, tags: dict[str, str]) -> dict[str, Any]:
        """TagResource of a deployment (``arn:aws:greengrass:<region>:<account>:deployments:<id>``): adds or
        replaces ``tags`` (API Reference, TagResource); other resource types are not emulated."""
        deployment_id = resource_arn.rsplit(":deployments:", 1)[-1] if ":deployments:" in resource_arn else None
        with self.lock:
            deployment = self.deployments.get(deployment_id or "")
            if deployment is None:
                raise GreengrassError(404, "ResourceNotFoundException", f"Resource {resource_arn} not found")
            deployment["tags"] = {**deployment["tags"], **tags}
        return {}

    def _list_deployments(self, query: dict[str, str]) -> dict[str, Any]:
        target = query.get("targetArn")
        history = query.get("historyFilter", "LATEST_ONLY")
        items = []
        with self.lock:
            for d in sorted(self.deployments.values(), key=lambda d: d["creationTimestamp"], reverse=True):
                if target and d["targetArn"] != target:
                    continue
                if history == "LATEST_ONLY" and not d["isLatestForTarget"]:
                    continue
                items.append({k: d[k] for k in ("targetArn", "revisionId", "deploymentId", "deploymentName",
                                                 "creationTimestamp", "deploymentStatus", "isLatestForTarget")})
        return {"deployments": items}

    def _cancel(self, deployment_id: str) -> dict[str, Any]:
        with self.lock:
            deployment = self.deployments.get(deployment_id)
            if deployment is None:
                raise GreengrassError(404, "ResourceNotFoundException", f"Deployment {deployment_id} not found")
            deployment["deploymentStatus"] = "CANCELED"
            self.cancels[deployment_id].set()
            things = [t for t, d in self.devices.items() if deployment_id in d["effective"]]
        for thing in things:
            self._set_device(deployment_id, thing, "CANCELED", "deployment canceled")
        self.sandbox.events.emit("greengrass", "cancel", f"deployment {deployment_id} CANCELED", deployment_id=deployment_id)
        return {"message": "SUCCESS"}

    def _core_device(self, thing: str, full: bool = False) -> dict[str, Any]:
        d = self.devices[thing]
        item = {"coreDeviceThingName": thing, "status": d["status"], "lastStatusUpdateTimestamp": d["updated"],
                "platform": "linux", "architecture": "aarch64", "runtime": "aws_nucleus_classic"}
        if full:
            item.update({"coreVersion": "2.14.0", "tags": {}})
        return item

    def _list_core_devices(self, query: dict[str, str]) -> dict[str, Any]:
        group_arn = query.get("thingGroupArn")
        status = query.get("status")
        items = []
        for thing, d in self.devices.items():
            if group_arn and group_arn.rsplit("/", 1)[-1] not in d["groups"]:
                continue
            if status and d["status"] != status:
                continue
            items.append(self._core_device(thing))
        return {"coreDevices": items}


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()
