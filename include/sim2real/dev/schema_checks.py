"""Check each JSON Schema against its meta-schema once per process (the sandbox's DAG runs and the tests; nothing
that ships).

``jsonschema.validate(instance, schema)`` first checks ``schema`` itself against its draft's meta-schema
(``check_schema``), then the instance. Airflow validates every ``Param`` that way each time a ``ParamsDict`` is
dumped, compared or printed, and ``dag.test()`` does all three for every operator it serializes (the operator's
``params`` against their default, and a mapped operator's partial arguments): the ``sim_to_real`` DAG's 44 params
cost 5 ms per dump, 4 of them the meta-schema checks, about 15 % of a fault-replay process's CPU (py-spy, 2026-12-05).
A schema's check against its meta-schema gives the same answer every time; the instance is still validated on every
call. Only a schema that passed is remembered (by its JSON text): an invalid one raises ``SchemaError`` every time.
"""

from __future__ import annotations

import json
from typing import Any

#: Set on the installed ``check_schema`` so that a second :func:`check_schema_once` leaves it as it is.
_MARK = "_sim2real_check_schema_once"

#: Each patched validator class's own ``check_schema`` (the function under the classmethod).
ORIGINAL: dict[type, Any] = {}

#: ``(validator class, schema as sorted JSON)`` of every schema that passed its meta-schema check.
CHECKED: set[tuple[type, str]] = set()


def check_schema_once() -> bool:
    """Make every jsonschema draft validator's ``check_schema`` check a given schema once in this process.

    A call with more than the schema (a ``format_checker``), or with a schema that is not JSON, is checked as before.

    :return: ``True`` when installed now, ``False`` when it already was.
    """
    from jsonschema import validators

    classes = [validators.Draft3Validator, validators.Draft4Validator, validators.Draft6Validator,
               validators.Draft7Validator, validators.Draft201909Validator, validators.Draft202012Validator]
    if getattr(classes[0].check_schema, _MARK, False):
        return False
    for cls in classes:
        ORIGINAL[cls] = cls.check_schema.__func__

        def check_schema(cls, schema, *args, **kwargs):
            original = next(ORIGINAL[c] for c in cls.__mro__ if c in ORIGINAL)  # a subclass inherits this one
            if args or kwargs:
                return original(cls, schema, *args, **kwargs)
            try:
                key = (cls, json.dumps(schema, sort_keys=True))
            except (TypeError, ValueError):
                return original(cls, schema)
            if key not in CHECKED:
                original(cls, schema)
                CHECKED.add(key)
            return None

        setattr(check_schema, _MARK, True)
        cls.check_schema = classmethod(check_schema)
    return True
