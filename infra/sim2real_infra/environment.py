"""The environment config (shape: :mod:`sim2real.orchestration.config`) written to SSM for the DAG."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sim2real.orchestration.config import ENV_SSM_PARAMETER, ENV_VARIABLE


class EnvironmentStack(cdk.Stack):
    """Writes the environment config JSON to ``/sim2real/environment`` (``config.ENV_SSM_PARAMETER``)
    and to ``<variables_prefix>/sim2real_environment``, where MWAA's SSM secrets backend serves it as
    the Airflow Variable ``sim2real_environment`` (no copy step needed on MWAA)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: dict[str, Any], variables_prefix: str,
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        value = self.to_json_string(config)
        self.parameter = ssm.StringParameter(self, "EnvironmentConfig", parameter_name=ENV_SSM_PARAMETER,
                                             string_value=value, tier=ssm.ParameterTier.STANDARD,
                                             description="sim2real environment config (sim2real.orchestration.config shape)")
        self.variable_parameter_name = f"{variables_prefix}/{ENV_VARIABLE}"
        self.variable = ssm.StringParameter(self, "AirflowVariable", parameter_name=self.variable_parameter_name,
                                            string_value=value, tier=ssm.ParameterTier.STANDARD,
                                            description="Airflow Variable sim2real_environment (MWAA secrets backend)")
        self.parameter_names = [ENV_SSM_PARAMETER, self.variable_parameter_name]
