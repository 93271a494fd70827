"""The base of the project's AWS waiter triggers: the provider's ``AwsBaseWaiterTrigger`` with its hook built
from ``aws_hook_class``.

``AwsBaseWaiterTrigger.hook()`` is abstract in apache-airflow-providers-amazon up to 9.34.0, the version the
Amazon MWAA 3.3.1 image ships; later releases build the hook from ``aws_hook_class``. A trigger that only
sets ``aws_hook_class`` cannot be instantiated on 9.34.0 (``TypeError: Can't instantiate abstract class``), so
every deferred wait would fail there. This class implements ``hook()`` the way both versions expect.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook
from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger


class AwsHookWaiterTrigger(AwsBaseWaiterTrigger):
    """``AwsBaseWaiterTrigger`` whose ``hook()`` is ``aws_hook_class`` built from the serialized connection
    parameters (connection id, region, SSL verification, botocore config).

    Subclasses set ``aws_hook_class`` to an ``AwsGenericHook`` subclass.

    :raises AttributeError: on use, when the subclass sets no ``aws_hook_class``.
    """

    aws_hook_class: type[AwsGenericHook]

    @property
    def _hook_parameters(self) -> dict[str, Any]:
        """The hook constructor's keywords from the serialized parameters (also for other hooks a trigger
        builds, e.g. CloudWatch Logs for progress lines). Provider 9.34.0 has no such property."""
        return {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name,
                "verify": self.verify, "config": self.botocore_config}

    def hook(self) -> AwsGenericHook:
        """The hook of ``aws_hook_class`` for this trigger's connection, region, verify and botocore config."""
        hook_class = getattr(type(self), "aws_hook_class", None)
        if hook_class is None:
            raise AttributeError(f"{type(self).__name__}.aws_hook_class is not set")
        return hook_class(**self._hook_parameters)
