"""Greengrass v2 recipes: the shipped ones validate; broken ones fail with a clear message."""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import pytest

from sim2real.edge.recipes import (BUCKET_PLACEHOLDER, RecipeError, artifact_keys, load_recipes, render_recipe,
                                   validate_recipe)

NAMES = {"com.sim2real.PolicySetup", "com.sim2real.PolicyInference", "com.sim2real.PolicyBenchmark",
         "com.sim2real.FieldUploader"}


@pytest.fixture(scope="module")
def recipes():
    return load_recipes()


def test_shipped_recipes_are_valid(recipes):
    assert set(recipes) == NAMES
    for recipe in recipes.values():
        assert validate_recipe(recipe, others=recipes) == []
        assert recipe["ComponentVersion"] == "1.0.0"
        conf = recipe["ComponentConfiguration"]["DefaultConfiguration"]
        assert {"ModelS3Uri", "ModelSha256", "Port", "EnginePrecision", "ModelPackageArn"} <= set(conf)
        assert conf["Port"] == 5555 and conf["EnginePrecision"] == "fp16"
        assert [m["Platform"]["architecture"] for m in recipe["Manifests"]] == ["aarch64", "amd64"]
        json.dumps(recipe)  # inlineRecipe-ready


def test_dependencies(recipes):
    assert recipes["com.sim2real.PolicyInference"]["ComponentDependencies"]["com.sim2real.PolicySetup"][
        "DependencyType"] == "HARD"
    assert recipes["com.sim2real.PolicyBenchmark"]["ComponentDependencies"]["com.sim2real.PolicyInference"][
        "DependencyType"] == "SOFT"


def test_render_fills_bucket(recipes):
    setup = recipes["com.sim2real.PolicySetup"]
    with pytest.raises(RecipeError, match="placeholder"):
        validate_recipe(setup, require_rendered=True)
    rendered = render_recipe(setup, "sim2real-artifacts-123456789012")
    validate_recipe(rendered, require_rendered=True)
    assert BUCKET_PLACEHOLDER in json.dumps(setup)  # the original is not modified
    prefix = "greengrass/artifacts/com.sim2real.PolicySetup/1.0.0/"
    assert artifact_keys(rendered) == {  # the edge package and the contract, each its own wheel
        "sim2real_contract-0.1.0-py3-none-any.whl": prefix + "sim2real_contract-0.1.0-py3-none-any.whl",
        "sim2real_edge-0.1.0-py3-none-any.whl": prefix + "sim2real_edge-0.1.0-py3-none-any.whl",
        "requirements-edge.txt": prefix + "requirements-edge.txt"}
    with pytest.raises(ValueError, match="invalid S3 bucket name"):
        render_recipe(setup, "Bad_Bucket")


def _broken(recipes, name, mutate):
    r = copy.deepcopy(recipes[name])
    mutate(r)
    return r


@pytest.mark.parametrize("name, mutate, match", [
    ("com.sim2real.PolicySetup", lambda r: r.pop("ComponentName"), "missing required key ComponentName"),
    ("com.sim2real.PolicySetup", lambda r: r.update(ComponentVersion="1.0"), "ComponentVersion '1.0' is not semver"),
    ("com.sim2real.PolicySetup", lambda r: r.update(ComponentVersion="v1.0.0"), "not semver"),
    ("com.sim2real.PolicySetup", lambda r: r.update(RecipeFormatVersion="2021-01-01"), "RecipeFormatVersion must be"),
    ("com.sim2real.PolicySetup",
     lambda r: r["Manifests"][0]["Lifecycle"]["Install"].update(Script="run {configuration:/ModelUri}"),
     r"\{configuration:/ModelUri\} names no key of DefaultConfiguration"),
    ("com.sim2real.PolicySetup",
     lambda r: r["Manifests"][1]["Lifecycle"].update(Run="echo {work:dir}"), r"unknown recipe variable \{work:dir\}"),
    ("com.sim2real.PolicyInference",
     lambda r: r["ComponentDependencies"]["com.sim2real.PolicySetup"].update(DependencyType="STRONG"),
     "DependencyType must be HARD or SOFT, got 'STRONG'"),
    ("com.sim2real.PolicyInference",
     lambda r: r["ComponentDependencies"].pop("com.sim2real.PolicySetup"),
     "refers to com.sim2real.PolicySetup, which is not in ComponentDependencies"),
    ("com.sim2real.PolicyBenchmark",
     lambda r: r["Manifests"][0]["Lifecycle"]["Run"].update(Script="x {com.sim2real.PolicyInference:configuration:/Prt}"),
     "names no key of com.sim2real.PolicyInference's DefaultConfiguration"),
    ("com.sim2real.PolicyInference", lambda r: r["Manifests"][0]["Lifecycle"].update(Startup="x"),
     "Run and Startup cannot both be defined"),
    ("com.sim2real.PolicyInference", lambda r: r["Manifests"][0]["Lifecycle"].update(Start="x"),
     r"unknown lifecycle keys \['Start'\]"),
    ("com.sim2real.PolicySetup", lambda r: r["Manifests"][0]["Lifecycle"]["Install"].update(Timeout="900"),
     "Timeout must be a positive integer"),
    ("com.sim2real.PolicySetup", lambda r: r.update(Manifests=[]), "Manifests must be a non-empty list"),
    ("com.sim2real.PolicySetup", lambda r: r["Manifests"][0]["Artifacts"][0].update(Uri="http://x/y"),
     "must be s3://"),
])
def test_broken_recipes_fail_clearly(recipes, name, mutate, match):
    with pytest.raises(RecipeError, match=match):
        validate_recipe(_broken(recipes, name, mutate), others=recipes)


def test_shell_braces_are_not_recipe_variables(recipes):
    r = copy.deepcopy(recipes["com.sim2real.PolicySetup"])
    r["Manifests"][0]["Lifecycle"]["Install"]["Script"] += '\necho "${HOME}" {not:a:variable}\n'
    validate_recipe(r)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_recipes(tmp_path)
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(RecipeError, match="not valid JSON"):
        load_recipes(tmp_path)


def test_inference_defaults_bind_loopback_and_resolve_the_token_at_install(recipes):
    inference = recipes["com.sim2real.PolicyInference"]
    conf = inference["ComponentConfiguration"]["DefaultConfiguration"]
    assert conf["Host"] == "127.0.0.1" and conf["EnableKill"] is False
    assert conf["ApiTokenSecretId"] == "" and conf["ApiTokenSsmParameter"] == ""
    assert inference["ComponentDependencies"]["aws.greengrass.TokenExchangeService"]["DependencyType"] == "HARD"
    for manifest in inference["Manifests"]:
        install, run = manifest["Lifecycle"]["Install"]["Script"], manifest["Lifecycle"]["Run"]["Script"]
        assert ("-m sim2real.edge.api_token --secret-id '{configuration:/ApiTokenSecretId}' --ssm-parameter "
                "'{configuration:/ApiTokenSsmParameter}' --out '{work:path}/api_token'") in install
        assert "--api-token-file '{work:path}/api_token'" in run and "--host '{configuration:/Host}'" in run
    for manifest in recipes["com.sim2real.PolicyBenchmark"]["Manifests"]:
        run = manifest["Lifecycle"]["Run"]["Script"]
        assert "--api-token-file '{com.sim2real.PolicyInference:work:path}/api_token'" in run


def _set_default(r, **values):
    r["ComponentConfiguration"]["DefaultConfiguration"].update(values)


def _edit_run(r, old, new):
    for m in r["Manifests"]:
        m["Lifecycle"]["Run"]["Script"] = m["Lifecycle"]["Run"]["Script"].replace(old, new)


@pytest.mark.parametrize("mutate, match", [
    (lambda r: _set_default(r, Host="0.0.0.0"),
     r"sim2real-policy-server binds '0.0.0.0' by default, which is not a loopback address, and no default "
     r"ApiTokenSecretId / ApiTokenSsmParameter names a token"),
    (lambda r: _edit_run(r, "'{configuration:/Host}'", "*"), r"binds '\*' by default"),
    (lambda r: _edit_run(r, " --api-token-file '{work:path}/api_token'", ""), "without --api-token-file"),
])
def test_open_policy_server_recipes_refused(recipes, mutate, match):
    with pytest.raises(RecipeError, match=match):
        validate_recipe(_broken(recipes, "com.sim2real.PolicyInference", mutate), others=recipes)


def test_open_bind_with_a_token_source_is_valid(recipes):
    r = _broken(recipes, "com.sim2real.PolicyInference",
                lambda r: _set_default(r, Host="0.0.0.0", ApiTokenSsmParameter="/sim2real/robots/policy-token"))
    assert validate_recipe(r, others=recipes) == []


def _run_argv(recipe, work: Path, setup_work: Path, merge: dict | None = None) -> list[str]:
    """The Run step's server arguments as the nucleus would pass them: the configuration (defaults with
    ``merge`` over them) and the work paths substituted (booleans as true/false), split as sh does."""
    config = {**recipe["ComponentConfiguration"]["DefaultConfiguration"], **(merge or {})}
    script = recipe["Manifests"][0]["Lifecycle"]["Run"]["Script"]
    script = script.replace("{com.sim2real.PolicySetup:work:path}", str(setup_work)).replace("{work:path}", str(work))
    script = re.sub(r"\{configuration:/(\w+)\}",
                    lambda m: json.dumps(config[m.group(1)]) if isinstance(config[m.group(1)], bool)
                    else str(config[m.group(1)]), script)
    words = shlex.split(script)
    assert words[:2] == ["exec", f"{work}/venv/bin/sim2real-policy-server"]
    return words[2:]


@pytest.mark.parametrize("merge", [None, {"MaxRequestBytes": 65536, "MaxArrays": 32, "MaxFrameBytes": 131072}])
def test_inference_run_passes_the_request_limits(recipes, onnx_model, tmp_path, monkeypatch, merge):
    """The recipe's limit keys reach the server: its real CLI parses the rendered Run step, and the
    defaults are the server's own."""
    from sim2real.edge import policy_server
    from sim2real.edge.codec import DEFAULT_MAX_ARRAYS, DEFAULT_MAX_REQUEST_BYTES

    inference = recipes["com.sim2real.PolicyInference"]
    conf = inference["ComponentConfiguration"]["DefaultConfiguration"]
    assert (conf["MaxRequestBytes"], conf["MaxArrays"], conf["MaxFrameBytes"]) == (
        DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_ARRAYS, policy_server.HARD_LIMIT_FACTOR * DEFAULT_MAX_REQUEST_BYTES)
    work, setup_work = tmp_path / "work", tmp_path / "setup"
    (setup_work / "model").mkdir(parents=True)
    work.mkdir()
    (setup_work / "model" / "ready.json").write_text(json.dumps({"model_path": str(onnx_model)}))
    (work / "api_token").touch(mode=0o600)  # no token source configured: the install step writes it empty
    served: list = []
    monkeypatch.setattr(policy_server.PolicyServer, "serve_forever", lambda self: served.append(self))
    monkeypatch.setattr(policy_server.signal, "signal", lambda *_: None)
    for manifest in inference["Manifests"]:
        assert manifest["Lifecycle"]["Run"]["Script"] == inference["Manifests"][0]["Lifecycle"]["Run"]["Script"]
    assert policy_server.main(_run_argv(inference, work, setup_work, merge)) == 0
    expected = {**conf, **(merge or {})}
    (server,) = served
    assert (server.max_request_bytes, server.max_arrays, server.max_frame_bytes) == (
        expected["MaxRequestBytes"], expected["MaxArrays"], expected["MaxFrameBytes"])


@pytest.mark.parametrize("mutate, match", [
    (lambda r: _set_default(r, MaxFrameBytes=16777216),
     r"MaxFrameBytes \(16777216\) must be larger than MaxRequestBytes \(16777216\)"),
    (lambda r: _set_default(r, MaxArrays=0), r"--max-arrays takes DefaultConfiguration MaxArrays, which must be an "
                                             r"integer >= 1, got 0"),
    (lambda r: _set_default(r, MaxRequestBytes="16 MiB"), r"MaxRequestBytes, which must be an integer >= 1024"),
    (lambda r: r["ComponentConfiguration"]["DefaultConfiguration"].pop("MaxFrameBytes"),
     r"\{configuration:/MaxFrameBytes\} names no key of DefaultConfiguration"),
])
def test_policy_server_limits_refused(recipes, mutate, match):
    with pytest.raises(RecipeError, match=match):
        validate_recipe(_broken(recipes, "com.sim2real.PolicyInference", mutate), others=recipes)


def test_field_uploader_runs_the_uploader_with_the_rendered_bucket(recipes, tmp_path, monkeypatch):
    """The field uploader's bucket is the artifacts bucket, filled in by render_recipe like the artifact URIs; its
    Run step's arguments parse with the uploader's real CLI."""
    from sim2real.edge import field_recorder

    uploader = recipes["com.sim2real.FieldUploader"]
    assert uploader["ComponentDependencies"]["aws.greengrass.TokenExchangeService"]["DependencyType"] == "HARD"
    with pytest.raises(RecipeError, match=r"DefaultConfiguration.FieldBucket still has the \$\{ARTIFACTS_BUCKET\}"):
        validate_recipe(uploader, require_rendered=True)
    rendered = render_recipe(uploader, "sim2real-artifacts-123456789012")
    assert validate_recipe(rendered, require_rendered=True) == []
    conf = rendered["ComponentConfiguration"]["DefaultConfiguration"]
    assert conf["FieldBucket"] == "sim2real-artifacts-123456789012" and conf["UploadIntervalSeconds"] == 60
    # data recording is off unless a deployment turns it on; the recorder names its data in the uploader's bucket
    assert conf["RecordData"] is False and "RecordData" in uploader["ComponentDescription"]
    assert field_recorder.recording_options(conf) == {"record_data": False, "bucket": conf["FieldBucket"],
                                                      "prefix": ""}
    assert field_recorder.recording_options({**conf, "RecordData": "true"})["record_data"] is True
    with pytest.raises(ValueError, match="RecordData must be a boolean, got 1"):
        field_recorder.recording_options({**conf, "RecordData": 1})
    script = rendered["Manifests"][0]["Lifecycle"]["Run"]["Script"]
    assert script == rendered["Manifests"][1]["Lifecycle"]["Run"]["Script"]
    script = re.sub(r"\{configuration:/(\w+)\}", lambda m: str(conf[m.group(1)]), script)
    script = script.replace("{iot:thingName}", "so101-arm-03").replace("{work:path}", str(tmp_path))
    words = shlex.split(script)
    assert words[:4] == ["exec", f"{tmp_path}/venv/bin/python", "-m", "sim2real.edge.field_recorder"]
    calls: list = []
    monkeypatch.setattr(field_recorder, "_client", lambda region, endpoint: "client")
    monkeypatch.setattr(field_recorder, "upload_spool", lambda *a, **kw: calls.append((a, kw)) or (_ for _ in ()).throw(
        KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # the first pass; the loop would go on every 60 s
        field_recorder.main(words[4:])
    assert calls == [(("client", "/var/lib/sim2real/field-spool", "sim2real-artifacts-123456789012", ""),
                      {"thing_name": "so101-arm-03", "attempts": 5})]
