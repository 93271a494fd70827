"""Greengrass: the robots' thing group, the component versions and the token exchange role."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_greengrassv2 as greengrassv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_iot as iot
from aws_cdk import aws_s3 as s3
from constructs import Construct

from sim2real.contract.field import DATA_FOLDER, episodes_prefix
from sim2real.edge.recipes import load_recipes, render_recipe, validate_recipe

from .policies import as_bucket, grant_prefixes
from .settings import Settings

#: A syntactically valid bucket name substituted by ``render_recipe`` and then replaced by the
#: bucket's (possibly unresolved) name with ``Fn::Join``.
_SENTINEL_BUCKET = "sim2real-bucket-name-sentinel"
#: Component artifacts (``s3://<bucket>/greengrass/artifacts/<component>/<version>/...``).
ARTIFACT_PREFIX = "greengrass/artifacts"
#: Field episode summaries the robots upload (``sim2real.contract.field.episode_key`` with the empty prefix).
FIELD_EPISODES_PREFIX = episodes_prefix("")
#: Field episodes' data files (``sim2real.contract.field.data_key`` with the empty prefix; with ``RecordData``).
FIELD_DATA_PREFIX = DATA_FOLDER
#: The robot's thing name in the token exchange role's policy: the IoT credentials provider sets this policy
#: variable when the device sends its thing name (header ``x-amzn-iot-thingname``) with the credentials request
#: (AWS IoT Developer Guide, "Authorizing direct calls to AWS services using AWS IoT Core credential provider").
THING_NAME = "${credentials-iot:ThingName}"
#: A PutObject with neither ``If-None-Match`` nor ``If-Match`` (condition keys ``s3:if-none-match``, ``s3:if-match``:
#: S3 User Guide, "Enforce conditional writes on Amazon S3 buckets"); the keys of one ``Null`` block are ANDed.
UNCONDITIONAL_WRITE = {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}}


def inline_recipe(recipe: dict, bucket_name: str) -> str:
    """The recipe JSON with ``${ARTIFACTS_BUCKET}`` replaced by ``bucket_name``.

    Uses :func:`sim2real.edge.recipes.render_recipe`. When ``bucket_name`` is a CDK token (the bucket
    name contains the account id), the JSON is split on a sentinel and the pieces are joined with the
    name between them (``Fn::Join`` with an empty delimiter: the delimiter cannot be a token), so
    CloudFormation writes the real name at deploy time.
    """
    if not cdk.Token.is_unresolved(bucket_name):
        return json.dumps(render_recipe(recipe, bucket_name), sort_keys=True)
    text = json.dumps(render_recipe(recipe, _SENTINEL_BUCKET), sort_keys=True)
    parts: list[str] = []
    for i, piece in enumerate(text.split(_SENTINEL_BUCKET)):
        parts += [bucket_name, piece] if i else [piece]
    return cdk.Fn.join("", parts)


class GreengrassStack(cdk.Stack):
    """Thing group ``<prefix>-robots``, one ``CfnComponentVersion`` per recipe in
    ``containers/greengrass/recipes``, and the core devices' token exchange role (role alias
    ``<prefix>-robots-tes``) that may read only the artifact and run prefixes of the bucket, write (PutObject only,
    conditional writes only) its own field episodes and their data files, ``field/episodes/<thing name>/`` and
    ``field/data/<thing name>/``, and read the policy server's api token (secrets
    ``<prefix>-robots/*``, SecureString parameters ``/<prefix>/robots/*``).

    :ivar components: ``{component name: version}`` (the environment config's ``greengrass.components``).
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, artifacts: s3.IBucket | str,
                 recipes_dir: str | Path | None = None, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        artifacts = as_bucket(self, artifacts)
        self.thing_group_name = settings.name("robots")
        iot.CfnThingGroup(self, "Robots", thing_group_name=self.thing_group_name,
                          thing_group_properties=iot.CfnThingGroup.ThingGroupPropertiesProperty(
                              thing_group_description="robots that run sim2real policies (Greengrass core devices)"))
        # the canary: a few of those robots (members of both groups), which get a release first (form field
        # canary_thing_group_name); the Airflow role may deploy to these two groups only
        self.canary_thing_group_name = settings.name("robots-canary")
        iot.CfnThingGroup(self, "RobotsCanary", thing_group_name=self.canary_thing_group_name,
                          thing_group_properties=iot.CfnThingGroup.ThingGroupPropertiesProperty(
                              thing_group_description="canary robots: a release is judged on their field episodes "
                                                      "before the fleet gets it"))
        recipes = load_recipes(recipes_dir)
        self.components: dict[str, str] = {}
        for name, recipe in sorted(recipes.items()):
            validate_recipe(recipe, others=recipes)
            self.components[name] = str(recipe["ComponentVersion"])
            greengrassv2.CfnComponentVersion(self, name.replace(".", ""),
                                             inline_recipe=inline_recipe(recipe, artifacts.bucket_name))

        self.token_exchange_role = iam.Role(
            self, "TokenExchangeRole",
            assumed_by=iam.ServicePrincipal("credentials.iot.amazonaws.com"),
            description="sim2real Greengrass core devices: component artifacts and approved models (read only), "
                        "field episode summaries (write once)",
        )
        grant_prefixes(self.token_exchange_role, artifacts, read=[f"{ARTIFACT_PREFIX}/", "runs/"], sid="Artifacts")
        # The field uploader (com.sim2real.FieldUploader, sim2real.edge.field_recorder) writes each episode summary,
        # and its data file when RecordData is on, once with a conditional PutObject (IfNoneMatch, then IfMatch for
        # the same bytes): PutObject only, no read, no list, no delete; each robot under its own thing name only,
        # and a PutObject with neither header is denied, so no robot can overwrite an episode.
        own = [artifacts.arn_for_objects(f"{FIELD_EPISODES_PREFIX}{THING_NAME}/*"),
               artifacts.arn_for_objects(f"{FIELD_DATA_PREFIX}{THING_NAME}/*")]
        self.token_exchange_role.add_to_policy(iam.PolicyStatement(
            sid="FieldEpisodes", actions=["s3:PutObject"], resources=own))
        self.token_exchange_role.add_to_policy(iam.PolicyStatement(
            sid="FieldEpisodesConditionalWritesOnly", effect=iam.Effect.DENY, actions=["s3:PutObject"],
            resources=own, conditions=UNCONDITIONAL_WRITE))
        self.token_exchange_role.add_to_policy(iam.PolicyStatement(
            sid="DeviceLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[self.format_arn(service="logs", resource="log-group", resource_name="/aws/greengrass/*",
                                       arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)],
        ))
        # The inference component's install resolves the policy server's api token from a secret named
        # <prefix>-robots/... or a SecureString parameter under /<prefix>/robots/ (sim2real.edge.api_token).
        self.token_exchange_role.add_to_policy(iam.PolicyStatement(
            sid="PolicyServerApiToken",
            actions=["secretsmanager:GetSecretValue"],
            resources=[self.format_arn(service="secretsmanager", resource="secret",
                                       resource_name=f"{settings.name('robots')}/*",
                                       arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)],
        ))
        self.token_exchange_role.add_to_policy(iam.PolicyStatement(
            sid="PolicyServerApiTokenParameter",
            actions=["ssm:GetParameter"],
            resources=[self.format_arn(service="ssm", resource="parameter",
                                       resource_name=f"{settings.prefix}/robots/*")],
        ))
        self.role_alias_name = settings.name("robots-tes")
        alias = iot.CfnRoleAlias(self, "TokenExchangeRoleAlias", role_alias=self.role_alias_name,
                                 role_arn=self.token_exchange_role.role_arn, credential_duration_seconds=3600)
        iot.CfnPolicy(self, "TokenExchangePolicy", policy_name=settings.name("robots-tes-assume"),
                      policy_document={"Version": "2012-10-17", "Statement": [{
                          "Effect": "Allow", "Action": "iot:AssumeRoleWithCertificate",
                          "Resource": alias.attr_role_alias_arn}]})
