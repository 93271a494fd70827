"""Every AWS waiter trigger of the project can be built and builds its hook on the installed provider.

On apache-airflow-providers-amazon 9.34.0 (Amazon MWAA 3.3.1) ``AwsBaseWaiterTrigger.hook`` is abstract, so a
trigger that only names ``aws_hook_class`` cannot be instantiated and every deferred wait fails in the
triggerer. ``AwsHookWaiterTrigger`` implements it for every provider version.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger

import sim2real.orchestration.triggers
from sim2real.orchestration.triggers.base import REQUIRED, AwsHookWaiterTrigger, StepWaitTrigger


def waiter_triggers() -> list[type]:
    found = []
    for info in pkgutil.iter_modules(sim2real.orchestration.triggers.__path__, "sim2real.orchestration.triggers."):
        module = importlib.import_module(info.name)
        found += [obj for obj in vars(module).values() if inspect.isclass(obj) and obj.__module__ == info.name
                  and issubclass(obj, AwsBaseWaiterTrigger) and obj not in (AwsHookWaiterTrigger, StepWaitTrigger)]
    return sorted(found, key=lambda c: c.__name__)


def test_all_twelve_waiter_triggers_use_the_base() -> None:
    names = [c.__name__ for c in waiter_triggers()]
    assert names == sorted(["BatchTrainingJobTrigger", "CanaryFieldEpisodesTrigger", "CodeBuildBuildCompleteTrigger",
                            "GreengrassDeploymentTrigger", "HyperPodEksJobTrigger", "HyperPodScaleTrigger", "HyperPodSlurmJobTrigger",
                            "ModelPackageApprovalTrigger",
                            "ModelPackageDecisionTrigger", "PipelineExecutionTrigger", "WorkstationCommandTrigger",
                            "WorkstationInstanceTrigger"])
    assert all(issubclass(c, AwsHookWaiterTrigger) for c in waiter_triggers())
    # every wait runs through the one wait core: a step function and the shared driver
    assert all(issubclass(c, StepWaitTrigger) and callable(c.step_function) for c in waiter_triggers())


@pytest.mark.parametrize("trigger_class", waiter_triggers(), ids=lambda c: c.__name__)
def test_instantiates_round_trips_and_builds_its_hook(trigger_class: type) -> None:
    assert not inspect.isabstract(trigger_class), sorted(trigger_class.__abstractmethods__)
    required = {name: "x" for name, default in trigger_class.fields.items() if default is REQUIRED}
    trigger = trigger_class(**required, aws_conn_id="aws_sim2real", region_name="eu-west-1", verify=False,
                            botocore_config={"retries": {"max_attempts": 7}})
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)
    hook = again.hook()
    assert isinstance(hook, trigger_class.aws_hook_class)
    assert (hook.aws_conn_id, hook.region_name, hook.verify) == ("aws_sim2real", "eu-west-1", False)
    assert hook.config.retries == {"max_attempts": 7}


def test_a_wait_field_is_declared_once_and_checked():
    """The constructor takes the declared fields as keywords, fills defaults, refuses unknown or missing ones."""
    from sim2real.orchestration.triggers.codebuild import CodeBuildBuildCompleteTrigger

    trigger = CodeBuildBuildCompleteTrigger(build_id="p:1")
    assert (trigger.build_id, trigger.stop_on_kill, trigger.waiter_delay, trigger.attempts) == ("p:1", True, 30, 240)
    assert trigger.serialize()[1]["build_id"] == "p:1"
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['build'\]"):
        CodeBuildBuildCompleteTrigger(build="p:1")
    with pytest.raises(TypeError, match=r"missing required keyword argument\(s\) \['build_id'\]"):
        CodeBuildBuildCompleteTrigger()


def test_a_trigger_that_cannot_build_its_hook_is_refused_when_its_class_is_created():
    """No ``aws_hook_class`` and no ``hook()`` of its own, or an ``aws_hook_class`` that is no AWS hook: a DAG
    import error, not a failure in the triggerer after the task deferred. The provider refuses such a subclass
    from 9.37.0 on (apache/airflow#72171), but not one that inherits a ``hook()`` override, as ours do."""
    from sim2real.orchestration.waits.codebuild import codebuild_build_step

    with pytest.raises(AttributeError, match="NoHook sets no aws_hook_class and does not override hook()"):
        type("NoHook", (StepWaitTrigger,), {"step_function": staticmethod(codebuild_build_step)})
    with pytest.raises(AttributeError, match="NamedHook.aws_hook_class is 'CodeBuildHook', not an AwsGenericHook"):
        type("NamedHook", (StepWaitTrigger,), {"aws_hook_class": "CodeBuildHook"})
    # a base for other triggers, and a trigger with its own hook(), need none
    assert type("WaitBase", (StepWaitTrigger,), {}, base=True).hook is AwsHookWaiterTrigger.hook
    own = type("OwnHook", (StepWaitTrigger,), {"hook": lambda self: S3Hook(**self._hook_parameters)})
    assert isinstance(own(region_name="eu-west-1").hook(), S3Hook)


def test_a_hook_that_needs_more_than_the_connection_gets_it_through_hook_parameters():
    """``_hook_parameters`` is what a trigger overrides when its hook takes more than the connection parameters (the
    provider's trigger base offers the same from 9.37.0 on, for ``EmrContainerHook``'s ``virtual_cluster_id``)."""
    from airflow.providers.amazon.aws.hooks.emr import EmrContainerHook

    class VirtualClusterWait(StepWaitTrigger):
        aws_hook_class = EmrContainerHook
        fields = {"virtual_cluster_id": REQUIRED}

        @property
        def _hook_parameters(self):
            return {**super()._hook_parameters, "virtual_cluster_id": self.virtual_cluster_id}

    hook = VirtualClusterWait(virtual_cluster_id="vc-1", region_name="eu-west-1", verify=False).hook()
    assert (type(hook), hook.virtual_cluster_id, hook.region_name, hook.verify) == (EmrContainerHook, "vc-1",
                                                                                     "eu-west-1", False)
