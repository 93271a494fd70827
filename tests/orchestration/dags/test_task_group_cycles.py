"""No two task groups of a DAG depend on each other both ways (nor in a longer loop).

The task graph can be acyclic while its task groups, each taken as one unit, are not: ``a.x >> b.y >> a.z`` makes
``a`` and ``b`` depend on each other. Airflow 3.4 warns about such a DAG when it parses it (``DAG.check_cycle``
emits ``airflow.sdk.exceptions.TaskGroupCycleDeprecationWarning``, "... depend on each other in a cycle. Cyclic
TaskGroup dependencies are deprecated and will fail Dag parsing in Airflow 3.5", recorded as the DAG warning
``DagWarningType.TASK_GROUP_CYCLE``; its check is the private ``TaskGroup._find_dependency_cycles``; apache/airflow
#73087 makes it an import error). Airflow 3.3 has no such check (``TaskGroup.topological_sort`` only looks at edges
into a group's roots), so this test computes the same projection from each DAG's ``task_dict`` itself, and on an
Airflow that has the warning also asserts ``check_cycle`` does not emit it.
"""

from __future__ import annotations

import graphlib
import warnings
from collections import defaultdict

import pytest

from tests.paths import DAGS


@pytest.fixture(scope="module")
def dags():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def _path(task) -> list[str]:
    """The task's enclosing task groups, outermost first, then the task itself (node ids)."""
    path = [task.task_id]
    group = task.task_group
    while group is not None and group.group_id is not None:
        path.append(group.group_id)
        group = group.parent_group
    return path[::-1]


def sibling_edges(dag) -> dict[tuple[str, ...], dict[str, set[str]]]:
    """Every task edge projected onto the children of the innermost group holding both ends.

    :return: scope (the group path, ``()`` = the DAG's root) → child node id → the sibling node ids it waits for
        (a child is a task or a whole task group: an edge into any task of a group is an edge into the group).
    """
    scopes: dict[tuple[str, ...], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for task in dag.task_dict.values():
        up = _path(task)
        for downstream in task.downstream_list:
            down = _path(downstream)
            depth = 0
            while up[depth] == down[depth]:
                depth += 1
            scopes[tuple(up[:depth])][down[depth]].add(up[depth])
    return scopes


def test_no_two_task_groups_depend_on_each_other_both_ways(dags):
    for dag in dags.values():
        groups = set(dag.task_group.get_task_group_dict()) - {None}
        edges = defaultdict(set)  # (upstream group, downstream group) → task edges
        for task in dag.task_dict.values():
            for downstream in task.downstream_list:
                a, b = task.task_group.group_id, downstream.task_group.group_id
                if a != b and a in groups and b in groups:
                    edges[a, b].add(f"{task.task_id} >> {downstream.task_id}")
        both_ways = {(a, b): sorted(edges[a, b] | edges[b, a]) for a, b in edges if (b, a) in edges and a < b}
        assert both_ways == {}, f"{dag.dag_id}: task groups that depend on each other both ways: {both_ways}"


def test_no_task_groups_depend_on_each_other_in_a_cycle(dags):
    for dag in dags.values():
        for scope, waits in sibling_edges(dag).items():
            try:
                tuple(graphlib.TopologicalSorter(waits).static_order())
            except graphlib.CycleError as err:
                pytest.fail(f"{dag.dag_id}, in {'/'.join(scope) or 'the root'}: a cycle {err.args[1]}")


def test_the_projection_finds_a_cycle_between_two_groups():
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, TaskGroup

    with DAG("two_groups_in_a_cycle", schedule=None) as dag:
        with TaskGroup("a"):
            first, last = EmptyOperator(task_id="first"), EmptyOperator(task_id="last")
        with TaskGroup("b"):
            middle = EmptyOperator(task_id="middle")
        first >> middle >> last
    assert sibling_edges(dag)[()] == {"b": {"a"}, "a": {"b"}}
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(sibling_edges(dag)[()]).static_order())


def test_airflows_own_check_does_not_warn(dags):
    exceptions = pytest.importorskip("airflow.sdk.exceptions")
    category = getattr(exceptions, "TaskGroupCycleDeprecationWarning", None)
    if category is None:
        pytest.skip("this Airflow has no task group cycle check (added in 3.4)")
    for dag in dags.values():
        with warnings.catch_warnings():
            warnings.simplefilter("error", category)
            dag.check_cycle()
