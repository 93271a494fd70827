"""Check each JSON Schema against its meta-schema once per process (the sandbox's DAG runs and the tests; nothing
that ships).

``jsonschema.validate(instance, schema)`` first checks ``schema`` itself against its draft's meta-schema
(``check_schema``), then the instance. Airflow validates every ``Param`` that way each time a ``ParamsDict`` is
dumped, compared or printed, and ``dag.test()`` does all three for every operator it serializes (the operator's
``params`` against their default, and a mapped operator's partial arguments): the ``sim_to_real`` DAG's 44 params
cost 5 ms per dump, 4 of them the meta-schema checks, and one fault-replay process (six scenarios) 87 CPU-seconds
instead of 78 with the check once (profiled and measured 2026-12-05). A schema's check against its meta-schema gives
the same answer every time; the instance is still validated on every call. Only a schema that passed is remembered,
by its JSON text, and only where that text reads back as the same schema (a tuple where the meta-schema wants an
array would not): an invalid one raises ``SchemaError`` every time.
"""

from __future__ import annotations

import json
import threading
from typing import Any

#: Set on the installed ``check_schema`` so that a second :func:`check_schema_once` leaves it as it is.
_MARK = "_sim2real_check_schema_once"

#: Each patched validator class's own ``check_schema`` (the function under the classmethod).
ORIGINAL: dict[type, Any] = {}

#: ``(validator class, schema as sorted JSON)`` of every schema that passed its meta-schema check.
CHECKED: set[tuple[type, str]] = set()

_INSTALL = threading.Lock()


def check_schema_once() -> bool:
    """Make the jsonschema draft validators' ``check_schema`` (drafts 3 to 2020-12, and classes that subclass them)
    check a given schema once in this process; it still raises ``SchemaError`` for a failing schema on every call.
    A call with more than the schema (a ``format_checker``), or with a schema whose JSON text does not read back as
    the same schema, is checked as before; so are validator classes made with ``validators.create`` or ``extend``.

    :return: ``True`` when installed now, ``False`` when it already was.
    """
    from jsonschema import validators

    classes = [validators.Draft3Validator, validators.Draft4Validator, validators.Draft6Validator,
               validators.Draft7Validator, validators.Draft201909Validator, validators.Draft202012Validator]
    with _INSTALL:
        todo = [cls for cls in classes if not getattr(cls.check_schema, _MARK, False)]
        for cls in todo:
            ORIGINAL.setdefault(cls, cls.check_schema.__func__)
            cls.check_schema = classmethod(_check_schema_once)
    return bool(todo)


def _check_schema_once(cls, schema, *args, **kwargs):
    original = next(ORIGINAL[c] for c in cls.__mro__ if c in ORIGINAL)  # a subclass inherits the installed one
    if args or kwargs:
        return original(cls, schema, *args, **kwargs)
    try:
        text = json.dumps(schema, sort_keys=True, allow_nan=False)
        same = json.loads(text) == schema
    except (TypeError, ValueError):
        same = False
    if not same:
        return original(cls, schema)
    key = (cls, text)
    if key not in CHECKED:
        original(cls, schema)
        CHECKED.add(key)
    return None


setattr(_check_schema_once, _MARK, True)
