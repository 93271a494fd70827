"""Plain helpers shared by the operator tests (the fixtures are in ``conftest.py``).

* ``FakeTI``: just enough of a task instance for ``operator.execute``: ``dag_id``/``task_id`` and an
  in-memory XCom (``ti.xcom``) behind ``xcom_push``/``xcom_pull``.
* ``first_event(trigger)``: run a trigger until its first event and return that event's payload
  (the trigger's generator is closed afterwards).

Named ``operator_helpers`` rather than ``helpers`` so it cannot clash with another test folder's
module of the same name on ``sys.path``.
"""

from __future__ import annotations

import asyncio


class FakeTI:
    dag_id = "sim_to_real"

    def __init__(self, task_id: str = "task"):
        self.task_id = task_id
        self.xcom: dict = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.xcom.get(key)


def first_event(trigger):
    async def go():
        gen = trigger.run()
        try:
            return (await gen.__anext__()).payload
        finally:
            await gen.aclose()

    return asyncio.run(go())
