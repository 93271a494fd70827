"""What every stage module shares: the plan section base class, the planning context and the typed
access to the plan's XComs in the DAG.

A stage's plan section is a dataclass (:class:`PlanSection`) whose ``SECTION`` is its key in the plan;
``plan_run`` stores ``dataclasses.asdict`` of it, so the plan stays plain JSON (Airflow XCom). In the DAG
file, operators read one plan value per XCom (``prepare_run`` pushes ``"<section>.<field>"`` for every
field); :func:`refs` turns those into attributes that are checked against the dataclass when the DAG is
parsed, so a misspelt field fails the parse instead of a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

S = TypeVar("S", bound="PlanSection")


@dataclass(frozen=True)
class PlanSection:
    """Base of the stages' plan sections. Subclasses set ``SECTION`` (their key in the plan)."""

    SECTION: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        """The section as plain JSON values (``dataclasses.asdict``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_plan(cls: type[S], plan: Mapping[str, Any]) -> S:
        """This section of a plan (``plan_run``'s output, also after a JSON round trip).

        :raises KeyError: the plan has no such section.
        :raises TypeError: the section's keys are not this dataclass's fields.
        """
        return cls(**plan[cls.SECTION])

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class PlanContext:
    """What every stage's planner gets: the run's identity and inputs (already validated)."""

    run_key: str
    bucket: str
    run_prefix: str  #: ``runs/<run_key>/``
    run_uri: str  #: ``s3://<bucket>/runs/<run_key>/``
    params: Mapping[str, Any]  #: the params the run uses (run defaults applied)
    env: Mapping[str, Any]  #: the environment config
    budget: Mapping[str, Any]  #: the run's cost estimate

    @property
    def checkpoint_uri(self) -> str:
        """``<run_uri>checkpoints/``: where the trainer writes its checkpoints and ``manifest.json``."""
        return f"{self.run_uri}checkpoints/"


class SectionRefs:
    """Attribute access to one plan section's per-field XComs of ``prepare_run`` (``XComArg["batch.job_name"]``).

    Only the section dataclass's fields exist: any other attribute raises ``AttributeError`` at parse time.
    """

    def __init__(self, plan_xcom: Any, section: type[PlanSection]) -> None:
        self._plan = plan_xcom
        self._section = section
        self._fields = frozenset(section.field_names())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._fields:
            raise AttributeError(f"plan section {self._section.SECTION!r} ({self._section.__name__}) has no "
                                 f"field {name!r}")
        return self._plan[f"{self._section.SECTION}.{name}"]


def refs(plan_xcom: Any, section: type[PlanSection]) -> SectionRefs:
    """Typed references to ``section``'s values in ``prepare_run``'s output (see :class:`SectionRefs`)."""
    return SectionRefs(plan_xcom, section)


def flat_xcoms(plan: Mapping[str, Any]) -> dict[str, Any]:
    """``prepare_run``'s return value: the nested plan (``plan``), ``run_key``, and one entry per
    ``"<section>.<field>"`` so that operators get native values (``XComArg["<section>.<field>"]``)."""
    flat: dict[str, Any] = {"plan": dict(plan), "run_key": plan["run_key"]}
    for section, value in plan.items():
        if isinstance(value, dict):
            flat.update({f"{section}.{key}": item for key, item in value.items()})
    return flat
