"""Greengrass v2 component recipes: load, render the artifact bucket, validate.

The recipes live in ``containers/greengrass/recipes/*.json`` (one component each). Artifact URIs
carry the placeholder ``${ARTIFACTS_BUCKET}`` because Greengrass does not interpolate artifact
URIs; :func:`render_recipe` substitutes the account's bucket before ``CreateComponentVersion``
(``inlineRecipe=json.dumps(recipe)``), in the artifact URIs and in the string values of
``DefaultConfiguration`` (the field uploader's ``FieldBucket``).

:func:`validate_recipe` checks a recipe against the Greengrass v2 recipe format (AWS IoT Greengrass
V2 Developer Guide, "Component recipe reference"): required top-level keys and their types,
``RecipeFormatVersion`` ``2020-01-25``, ``ComponentVersion`` as ``major.minor.patch`` semver,
manifests with a ``Platform`` map, lifecycle keys (Setenv, Install, Run, Startup, Shutdown, Recover,
Bootstrap; Run and Startup exclusive), lifecycle step keys, artifact keys, dependency types
``HARD``/``SOFT``, and recipe variables: ``{configuration:/X}`` must name a key of
``DefaultConfiguration``; ``{dep:...}`` must name a declared dependency (and, when the dependency's
recipe is given, a key of its configuration).

For a component that runs ``sim2real-policy-server`` it also checks the server's exposure: the Run
step passes ``--api-token-file`` (so a token resolved at install is used), and the default ``Host`` is
a loopback address unless a token source (``ApiTokenSecretId`` or ``ApiTokenSsmParameter``) is set
by default — the server itself refuses to start on any other address without a token. Its request
limits (``MaxRequestBytes``, ``MaxArrays``, ``MaxFrameBytes``, passed as ``--max-request-bytes``,
``--max-arrays``, ``--max-frame-bytes``) must default to integers the server accepts: at least 1024
bytes, at least 1 array, and a frame ceiling above the request limit (the server refuses to start
otherwise).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim2real.edge.security import is_loopback

RECIPE_FORMAT_VERSION = "2020-01-25"
BUCKET_PLACEHOLDER = "${ARTIFACTS_BUCKET}"
#: Default location of the recipes in a checkout (``containers/greengrass/recipes``).
DEFAULT_ROOT = Path(__file__).resolve().parents[3] / "containers" / "greengrass" / "recipes"

LIFECYCLE_KEYS = {"Setenv", "Install", "Run", "Startup", "Shutdown", "Recover", "Bootstrap"}
STEP_KEYS = {"Script", "RequiresPrivilege", "Skipif", "Timeout", "Setenv", "BootstrapOnRollback"}
ARTIFACT_KEYS = {"Uri", "Digest", "Algorithm", "Unarchive", "Permission"}
MANIFEST_KEYS = {"Platform", "Name", "Lifecycle", "Selections", "Artifacts"}
TOP_KEYS = {"RecipeFormatVersion", "ComponentName", "ComponentVersion", "ComponentType", "ComponentDescription",
            "ComponentPublisher", "ComponentSource", "ComponentConfiguration", "ComponentDependencies",
            "Manifests", "Lifecycle"}
COMPONENT_TYPES = {"aws.greengrass.generic", "aws.greengrass.lambda", "aws.greengrass.plugin", "aws.greengrass.nucleus"}
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
COMPONENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# A recipe variable: {[component:]namespace:key}; "${...}" (shell) is not one.
VARIABLE = re.compile(r"(?<!\$)\{(?:(?P<comp>[A-Za-z0-9._-]+):)?(?P<ns>configuration|artifacts|work|kernel|iot):(?P<key>[^{}]*)\}")
NS_KEYS = {"artifacts": {"path", "decompressedPath"}, "work": {"path"}, "kernel": {"rootPath"}, "iot": {"thingName"}}
DEP_NAMESPACES = {"configuration", "artifacts", "work"}
POLICY_SERVER_COMMAND = "sim2real-policy-server"
#: Configuration keys naming where the policy server's api token is (Secrets Manager / SSM SecureString).
TOKEN_SOURCE_KEYS = ("ApiTokenSecretId", "ApiTokenSsmParameter")
#: Configuration keys of the policy server's request limits -> (command-line option, smallest value the server takes).
LIMIT_KEYS = {"MaxRequestBytes": ("--max-request-bytes", 1024), "MaxArrays": ("--max-arrays", 1),
              "MaxFrameBytes": ("--max-frame-bytes", 1025)}
_HOST_ARG = re.compile(r"--host(?:=|\s+)'?([^'\s]+)'?")


class RecipeError(ValueError):
    """A recipe does not follow the Greengrass v2 recipe format; the message lists every problem."""


def load_recipes(root: str | Path | None = None, artifacts_bucket: str | None = None) -> dict[str, dict[str, Any]]:
    """Read every ``*.json`` recipe under ``root``.

    Args:
        root: folder of recipes (default: ``containers/greengrass/recipes`` of this checkout).
        artifacts_bucket: if given, substitute it for ``${ARTIFACTS_BUCKET}`` in artifact URIs.

    Returns:
        ``{ComponentName: recipe dict}``.

    Raises:
        FileNotFoundError: no such folder or no recipe in it. RecipeError: unparsable JSON or two
        files with the same ComponentName.
    """
    root = Path(root) if root is not None else DEFAULT_ROOT
    files = sorted(root.glob("*.json")) if root.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no *.json recipes in {root}")
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        try:
            recipe = json.loads(f.read_text())
        except json.JSONDecodeError as exc:
            raise RecipeError(f"{f}: not valid JSON: {exc}") from exc
        name = recipe.get("ComponentName") if isinstance(recipe, dict) else None
        if not isinstance(name, str):
            raise RecipeError(f"{f}: recipe has no ComponentName")
        if name in out:
            raise RecipeError(f"{f}: duplicate ComponentName {name!r}")
        out[name] = render_recipe(recipe, artifacts_bucket) if artifacts_bucket else recipe
    return out


def render_recipe(recipe: Mapping[str, Any], artifacts_bucket: str) -> dict[str, Any]:
    """Copy of ``recipe`` with ``${ARTIFACTS_BUCKET}`` replaced in every artifact URI and every string value of
    ``ComponentConfiguration.DefaultConfiguration`` (top level).

    Raises:
        ValueError: ``artifacts_bucket`` is not a valid S3 bucket name.
    """
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", artifacts_bucket or ""):
        raise ValueError(f"invalid S3 bucket name {artifacts_bucket!r}")
    out = copy.deepcopy(dict(recipe))
    for manifest in out.get("Manifests") or []:
        for art in manifest.get("Artifacts") or []:
            if isinstance(art.get("Uri"), str):
                art["Uri"] = art["Uri"].replace(BUCKET_PLACEHOLDER, artifacts_bucket)
    for key, value in _default_configuration(out).items():
        if isinstance(value, str):
            out["ComponentConfiguration"]["DefaultConfiguration"][key] = value.replace(BUCKET_PLACEHOLDER,
                                                                                       artifacts_bucket)
    return out


def _default_configuration(recipe: Mapping[str, Any]) -> dict[str, Any]:
    cc = recipe.get("ComponentConfiguration")
    conf = cc.get("DefaultConfiguration") if isinstance(cc, Mapping) else None
    return dict(conf) if isinstance(conf, Mapping) else {}


def artifact_keys(recipe: Mapping[str, Any]) -> dict[str, str]:
    """``{file name: S3 key}`` of the recipe's S3 artifacts (what must be uploaded before deploying)."""
    out: dict[str, str] = {}
    for manifest in recipe.get("Manifests") or []:
        for art in manifest.get("Artifacts") or []:
            uri = art.get("Uri", "")
            if uri.startswith("s3://"):
                key = uri[5:].split("/", 1)[1]
                out[key.rsplit("/", 1)[-1]] = key
    return out


def _json_pointer_exists(doc: Any, pointer: str) -> bool:
    if pointer == "":
        return True
    if not pointer.startswith("/"):
        return False
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, Mapping) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return False
    return True


def _strings(obj: Any, path: str):
    if isinstance(obj, str):
        yield path, obj
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _strings(v, f"{path}[{i}]")


def _check_lifecycle(lc: Any, where: str, errors: list[str]) -> None:
    if not isinstance(lc, Mapping):
        errors.append(f"{where}: Lifecycle must be a map")
        return
    unknown = set(lc) - LIFECYCLE_KEYS
    if unknown:
        errors.append(f"{where}: unknown lifecycle keys {sorted(unknown)} (allowed: {sorted(LIFECYCLE_KEYS)})")
    if "Run" in lc and "Startup" in lc:
        errors.append(f"{where}: Run and Startup cannot both be defined")
    for key, step in lc.items():
        if key == "Setenv":
            if not isinstance(step, Mapping) or not all(isinstance(v, (str, int, float, bool)) for v in step.values()):
                errors.append(f"{where}.Setenv must be a map of name -> scalar")
            continue
        if isinstance(step, str):
            continue
        if not isinstance(step, Mapping):
            errors.append(f"{where}.{key} must be a script string or a map")
            continue
        if set(step) - STEP_KEYS:
            errors.append(f"{where}.{key}: unknown keys {sorted(set(step) - STEP_KEYS)} (allowed: {sorted(STEP_KEYS)})")
        if not isinstance(step.get("Script"), str) or not step.get("Script", "").strip():
            errors.append(f"{where}.{key}.Script must be a non-empty string")
        if "RequiresPrivilege" in step and not isinstance(step["RequiresPrivilege"], bool):
            errors.append(f"{where}.{key}.RequiresPrivilege must be a boolean")
        if "Timeout" in step and (isinstance(step["Timeout"], bool) or not isinstance(step["Timeout"], int)
                                  or step["Timeout"] <= 0):
            errors.append(f"{where}.{key}.Timeout must be a positive integer (seconds)")


def validate_recipe(recipe: Any, others: Mapping[str, Mapping[str, Any]] | None = None,
                    require_rendered: bool = False) -> list[str]:
    """Check ``recipe`` against the Greengrass v2 recipe format.

    Args:
        recipe: the recipe dict (as sent in ``CreateComponentVersion(inlineRecipe=...)``).
        others: recipes of other components by name; lets ``{dep:configuration:/X}`` be checked
            against the dependency's DefaultConfiguration.
        require_rendered: also refuse the unsubstituted ``${ARTIFACTS_BUCKET}`` placeholder (artifact URIs and
            default configuration).

    Returns:
        The list of warnings (currently always empty) when the recipe is valid.

    Raises:
        RecipeError: listing every problem found (joined by "; "), each naming the key at fault.
    """
    errors: list[str] = []
    if not isinstance(recipe, Mapping):
        raise RecipeError(f"recipe must be a JSON object, got {type(recipe).__name__}")
    name = recipe.get("ComponentName")
    label = name if isinstance(name, str) else "<recipe without ComponentName>"
    for key in ("RecipeFormatVersion", "ComponentName", "ComponentVersion"):
        if key not in recipe:
            errors.append(f"missing required key {key}")
    unknown = set(recipe) - TOP_KEYS
    if unknown:
        errors.append(f"unknown top-level keys {sorted(unknown)}")
    if "RecipeFormatVersion" in recipe and recipe["RecipeFormatVersion"] != RECIPE_FORMAT_VERSION:
        errors.append(f"RecipeFormatVersion must be {RECIPE_FORMAT_VERSION!r}, got {recipe['RecipeFormatVersion']!r}")
    if "ComponentName" in recipe and not (isinstance(name, str) and COMPONENT_NAME.match(name)):
        errors.append(f"ComponentName {name!r} is not a valid component name (letters, digits, . _ -; <=128)")
    version = recipe.get("ComponentVersion")
    if "ComponentVersion" in recipe and not (isinstance(version, str) and SEMVER.match(version)):
        errors.append(f"ComponentVersion {version!r} is not semver major.minor.patch (e.g. '1.0.0')")
    for key in ("ComponentDescription", "ComponentPublisher", "ComponentSource"):
        if key in recipe and not isinstance(recipe[key], str):
            errors.append(f"{key} must be a string")
    if "ComponentType" in recipe and recipe["ComponentType"] not in COMPONENT_TYPES:
        errors.append(f"ComponentType must be one of {sorted(COMPONENT_TYPES)}")

    config: Any = {}
    cc = recipe.get("ComponentConfiguration")
    if cc is not None:
        if not isinstance(cc, Mapping) or set(cc) - {"DefaultConfiguration"}:
            errors.append("ComponentConfiguration must be a map with only DefaultConfiguration")
        else:
            config = cc.get("DefaultConfiguration", {})
            if not isinstance(config, Mapping):
                errors.append("ComponentConfiguration.DefaultConfiguration must be a map")
                config = {}

    deps = recipe.get("ComponentDependencies") or {}
    if not isinstance(deps, Mapping):
        errors.append("ComponentDependencies must be a map of component name -> {VersionRequirement, DependencyType}")
        deps = {}
    for dep, spec in deps.items():
        if not isinstance(spec, Mapping):
            errors.append(f"ComponentDependencies.{dep} must be a map")
            continue
        if set(spec) - {"VersionRequirement", "DependencyType"}:
            errors.append(f"ComponentDependencies.{dep}: unknown keys {sorted(set(spec) - {'VersionRequirement', 'DependencyType'})}")
        if not isinstance(spec.get("VersionRequirement"), str) or not spec.get("VersionRequirement", "").strip():
            errors.append(f"ComponentDependencies.{dep}.VersionRequirement must be a non-empty string (e.g. '>=1.0.0 <2.0.0')")
        if spec.get("DependencyType", "HARD") not in ("HARD", "SOFT"):
            errors.append(f"ComponentDependencies.{dep}.DependencyType must be HARD or SOFT, got {spec.get('DependencyType')!r}")

    manifests = recipe.get("Manifests")
    if not isinstance(manifests, list) or not manifests:
        errors.append("Manifests must be a non-empty list")
        manifests = []
    for i, m in enumerate(manifests):
        where = f"Manifests[{i}]"
        if not isinstance(m, Mapping):
            errors.append(f"{where} must be a map")
            continue
        if set(m) - MANIFEST_KEYS:
            errors.append(f"{where}: unknown keys {sorted(set(m) - MANIFEST_KEYS)}")
        plat = m.get("Platform")
        if plat is not None and (not isinstance(plat, Mapping) or not all(isinstance(v, str) for v in plat.values())):
            errors.append(f"{where}.Platform must be a map of string -> string (os, architecture, ...)")
        elif isinstance(plat, Mapping) and plat.get("os", "*") not in ("linux", "windows", "darwin", "*"):
            errors.append(f"{where}.Platform.os {plat.get('os')!r} is not one of linux, windows, darwin, *")
        if "Lifecycle" in m:
            _check_lifecycle(m["Lifecycle"], f"{where}.Lifecycle", errors)
        elif "Lifecycle" not in recipe:
            errors.append(f"{where} has no Lifecycle (and the recipe has no global Lifecycle)")
        arts = m.get("Artifacts", [])
        if not isinstance(arts, list):
            errors.append(f"{where}.Artifacts must be a list")
            arts = []
        for j, a in enumerate(arts):
            aw = f"{where}.Artifacts[{j}]"
            if not isinstance(a, Mapping) or not isinstance(a.get("Uri"), str):
                errors.append(f"{aw} must be a map with a string Uri")
                continue
            if set(a) - ARTIFACT_KEYS:
                errors.append(f"{aw}: unknown keys {sorted(set(a) - ARTIFACT_KEYS)}")
            if not re.match(r"^(s3|greengrass|docker)://.+", a["Uri"]):
                errors.append(f"{aw}.Uri {a['Uri']!r} must be s3://, greengrass:// or docker://")
            if require_rendered and BUCKET_PLACEHOLDER in a["Uri"]:
                errors.append(f"{aw}.Uri still has the {BUCKET_PLACEHOLDER} placeholder (use render_recipe)")
            if a.get("Unarchive", "NONE") not in ("NONE", "ZIP"):
                errors.append(f"{aw}.Unarchive must be NONE or ZIP")
            perm = a.get("Permission", {})
            if not isinstance(perm, Mapping) or any(perm.get(k, "NONE") not in ("NONE", "OWNER", "ALL") for k in ("Read", "Execute")):
                errors.append(f"{aw}.Permission Read/Execute must be NONE, OWNER or ALL")
    if "Lifecycle" in recipe:
        _check_lifecycle(recipe["Lifecycle"], "Lifecycle", errors)

    # Recipe variables in every lifecycle string.
    lifecycles = [("Lifecycle", recipe.get("Lifecycle", {}))] + [
        (f"Manifests[{i}].Lifecycle", m.get("Lifecycle", {})) for i, m in enumerate(manifests) if isinstance(m, Mapping)]
    for where, lc in lifecycles:
        for path, text in _strings(lc, where):
            for mv in VARIABLE.finditer(text):
                comp, ns, key = mv.group("comp"), mv.group("ns"), mv.group("key")
                if comp is None:
                    if ns == "configuration":
                        if not _json_pointer_exists(config, key):
                            errors.append(f"{path}: {mv.group(0)} names no key of DefaultConfiguration "
                                          f"(keys: {sorted(config) if isinstance(config, Mapping) else []})")
                    elif key not in NS_KEYS[ns]:
                        errors.append(f"{path}: unknown recipe variable {mv.group(0)}")
                    continue
                if comp not in deps:
                    errors.append(f"{path}: {mv.group(0)} refers to {comp}, which is not in ComponentDependencies")
                elif ns not in DEP_NAMESPACES or (ns != "configuration" and key not in NS_KEYS[ns]):
                    errors.append(f"{path}: unknown recipe variable {mv.group(0)}")
                elif ns == "configuration" and others and comp in others:
                    dep_conf = (others[comp].get("ComponentConfiguration") or {}).get("DefaultConfiguration", {})
                    if not _json_pointer_exists(dep_conf, key):
                        errors.append(f"{path}: {mv.group(0)} names no key of {comp}'s DefaultConfiguration")
    if require_rendered and isinstance(config, Mapping):
        errors += [f"ComponentConfiguration.DefaultConfiguration.{k} still has the {BUCKET_PLACEHOLDER} placeholder "
                   "(use render_recipe)" for k, v in config.items() if isinstance(v, str) and BUCKET_PLACEHOLDER in v]
    _check_policy_server(lifecycles, config if isinstance(config, Mapping) else {}, errors)
    if errors:
        raise RecipeError(f"recipe {label}: " + "; ".join(errors))
    return []


def _check_policy_server(lifecycles: list[tuple[str, Any]], config: Mapping[str, Any], errors: list[str]) -> None:
    token_source = any(str(config.get(k) or "").strip() for k in TOKEN_SOURCE_KEYS)
    for where, lc in lifecycles:
        for path, text in _strings(lc, where):
            if POLICY_SERVER_COMMAND not in text:
                continue
            if "--api-token-file" not in text:
                errors.append(f"{path}: runs {POLICY_SERVER_COMMAND} without --api-token-file, so a token configured "
                              f"with {' / '.join(TOKEN_SOURCE_KEYS)} would not be used")
            _check_limits(path, text, config, errors)
            found = _HOST_ARG.search(text)
            host = found.group(1) if found else "127.0.0.1"
            ref = re.fullmatch(r"\{configuration:/([^{}]+)\}", host)
            if ref:
                host = str(config.get(ref.group(1), ""))
            if not is_loopback(host) and not token_source:
                errors.append(f"{path}: {POLICY_SERVER_COMMAND} binds {host!r} by default, which is not a loopback "
                              f"address, and no default {' / '.join(TOKEN_SOURCE_KEYS)} names a token: the server "
                              "would refuse to start (use Host 127.0.0.1 or name a token source)")


def _check_limits(path: str, text: str, config: Mapping[str, Any], errors: list[str]) -> None:
    """The policy server's limits: each option that names a configuration key must get an integer the
    server accepts by default, and the frame ceiling must be above the request limit."""
    values: dict[str, int] = {}
    for key, (option, smallest) in LIMIT_KEYS.items():
        if f"{option} '{{configuration:/{key}}}'" not in text:
            continue
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
            errors.append(f"{path}: {option} takes DefaultConfiguration {key}, which must be an integer >= {smallest}, "
                          f"got {value!r}")
        else:
            values[key] = value
    if "MaxRequestBytes" in values and "MaxFrameBytes" in values and values["MaxFrameBytes"] <= values["MaxRequestBytes"]:
        errors.append(f"{path}: DefaultConfiguration MaxFrameBytes ({values['MaxFrameBytes']}) must be larger than "
                      f"MaxRequestBytes ({values['MaxRequestBytes']}): {POLICY_SERVER_COMMAND} refuses to start otherwise")
