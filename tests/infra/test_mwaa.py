"""The MWAA environment: Airflow 3, deferrable operators, bundle by S3 object version, private."""

from __future__ import annotations

from .conftest import MWAA_VERSIONS, Synth


def test_mwaa_environment(synth: Synth) -> None:
    t = synth.template(synth.stacks.mwaa)
    env = next(iter(t.find_resources("AWS::MWAA::Environment").values()))["Properties"]
    assert env["Name"] == "sim2real"
    assert env["AirflowVersion"].startswith("3.")
    assert env["AirflowConfigurationOptions"]["operators.default_deferrable"] == "true"
    # the nightly schedule's time zone, the same value as the environment config's schedule_timezone
    assert env["AirflowConfigurationOptions"]["sim2real.schedule_timezone"] == "UTC"
    # the Airflow deployment's identity in the run records (sim2real.orchestration.run_records.deployment_id)
    assert env["AirflowConfigurationOptions"]["sim2real.deployment_id"] == "mwaa:sim2real"
    assert env["AirflowConfigurationOptions"]["secrets.backend"].endswith("SystemsManagerParameterStoreBackend")
    assert '"variables_prefix": "/sim2real/airflow/variables"' in env["AirflowConfigurationOptions"]["secrets.backend_kwargs"]
    assert env["DagS3Path"] == "dags"
    assert (env["PluginsS3Path"], env["PluginsS3ObjectVersion"]) == ("plugins.zip", MWAA_VERSIONS["plugins.zip"])
    assert (env["RequirementsS3Path"], env["RequirementsS3ObjectVersion"]) == (
        "requirements.txt", MWAA_VERSIONS["requirements.txt"])
    assert (env["StartupScriptS3Path"], env["StartupScriptS3ObjectVersion"]) == ("startup.sh", MWAA_VERSIONS["startup.sh"])
    assert env["WebserverAccessMode"] == "PRIVATE_ONLY"
    assert len(env["NetworkConfiguration"]["SubnetIds"]) == 2
    assert all(v["Enabled"] for v in env["LoggingConfiguration"].values())
    assert "sim2real-mwaa-" in str(env["SourceBucketArn"])


def test_environment_waits_for_its_role_policies(synth: Synth) -> None:
    t = synth.template(synth.stacks.mwaa).to_json()
    (env,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::MWAA::Environment"]
    policies = [k for k, r in t["Resources"].items() if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")]
    assert len(policies) == 3 and set(policies) <= set(env["DependsOn"])
