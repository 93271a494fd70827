"""msgpack wire codec for the policy server, with numpy arrays (never pickle).

Wire format (the GR00T policy server's, NVIDIA Isaac-GR00T ``MsgSerializer``): a numpy array travels
as the map ``{"__ndarray_class__": True, "as_npy": <bytes of np.save(array, allow_pickle=False)>}``; a
GR00T ``ModalityConfig`` as ``{"__ModalityConfig_class__": True, "as_json": <its fields>}`` (a map in
GR00T N1.6, a JSON string in N1.5; see :func:`modality_config_wire`); every other value is plain
msgpack (maps, lists, str, bytes, int, float, bool, nil). Tuples decode as lists. numpy scalars are
encoded as Python scalars. ModalityConfig maps are decoded as plain maps (this side has no class).

Decoding never unpickles: :func:`load_npy` refuses object arrays (as ``np.load(..., allow_pickle=False)``,
which it falls back to for unusual headers), and the payload size is checked *before* msgpack touches
it (``max_bytes``).
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import msgpack
import numpy as np

NDARRAY_KEY = "__ndarray_class__"
NPY_KEY = "as_npy"
MODALITY_CONFIG_KEY = "__ModalityConfig_class__"
MODALITY_CONFIG_JSON_KEY = "as_json"

#: Default upper bound of one request, in bytes (16 MiB: a few camera frames at 256x256x3).
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024


class CodecError(ValueError):
    """The payload is not valid for this protocol (not msgpack, too large, bad array)."""


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError("object arrays cannot be sent (no pickle on this wire)")
        buf = io.BytesIO()
        np.save(buf, obj, allow_pickle=False)
        return {NDARRAY_KEY: True, NPY_KEY: buf.getvalue()}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode object of type {type(obj).__name__}")


#: The header ``np.save`` writes for a plain array (``descr``, C order, ``shape``), padded with spaces.
_NPY_HEADER = re.compile(rb"\{'descr': '([<>|=]?[a-zA-Z][0-9]*)', 'fortran_order': False, "
                         rb"'shape': \(((?:[0-9]+, )*(?:[0-9]+,?)?)\), \} *\n?")


def load_npy(raw: bytes) -> np.ndarray:
    """Decode ``.npy`` bytes (``np.save`` output) without pickle; returns a writeable array.

    The header of a plain C-order array of a built-in numeric/bool/string dtype is matched with a
    strict pattern and the data copied out (``np.load`` spends most of its time evaluating that
    header with ``ast.literal_eval``); any other header is handed to ``np.load(allow_pickle=False)``.

    Raises:
        CodecError: not ``.npy``, an object dtype, data shorter or longer than the header says.
    """
    if raw[:6] != b"\x93NUMPY":
        raise CodecError("invalid .npy payload: it does not start with the .npy magic string")
    if len(raw) >= 10:
        major = raw[6]
        if major == 1:
            start, size = 10, int.from_bytes(raw[8:10], "little")
        elif major in (2, 3) and len(raw) >= 12:
            start, size = 12, int.from_bytes(raw[8:12], "little")
        else:
            start, size = 0, 0
        found = _NPY_HEADER.fullmatch(raw, start, start + size) if size else None
        if found:
            try:
                dtype = np.dtype(found.group(1).decode("ascii"))
            except TypeError as exc:
                raise CodecError(f"invalid .npy payload: unknown dtype {found.group(1)!r}") from exc
            if dtype.hasobject:
                raise CodecError("invalid .npy payload: object arrays cannot be loaded (no pickle on this wire)")
            shape = tuple(int(d) for d in found.group(2).split(b",") if d.strip())
            count = 1
            for d in shape:
                count *= d
            offset = start + size
            if len(raw) - offset != count * dtype.itemsize:
                raise CodecError(f"invalid .npy payload: {len(raw) - offset} data bytes for shape {shape} "
                                 f"of {dtype} ({count * dtype.itemsize} expected)")
            return np.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
    try:
        return np.load(io.BytesIO(raw), allow_pickle=False)
    except Exception as exc:  # ValueError for object arrays / bad headers
        raise CodecError(f"invalid .npy payload: {exc}") from exc


def _object_hook(obj: dict) -> Any:
    if obj.get(NDARRAY_KEY) is True and NPY_KEY in obj:
        raw = obj[NPY_KEY]
        if not isinstance(raw, (bytes, bytearray)):
            raise CodecError(f"'{NPY_KEY}' must be bytes, got {type(raw).__name__}")
        return load_npy(bytes(raw))
    return obj


def modality_config_wire(fields: dict[str, Any], as_json_string: bool = False) -> dict[str, Any]:
    """The wire map of a GR00T ``ModalityConfig`` with ``fields`` (``delta_indices``, ``modality_keys``, ...).

    Args:
        fields: the dataclass/pydantic fields, JSON-ready.
        as_json_string: True for GR00T N1.5 (its decoder runs ``json.loads`` on ``as_json``); False for
            N1.6 (its decoder calls ``ModalityConfig(**as_json)``).
    """
    return {MODALITY_CONFIG_KEY: True,
            MODALITY_CONFIG_JSON_KEY: json.dumps(fields) if as_json_string else dict(fields)}


def packb(obj: Any) -> bytes:
    """Encode ``obj`` (nested dict/list/scalars/numpy arrays) to msgpack bytes.

    Raises:
        TypeError: an object that has no wire form (e.g. an object-dtype array, a set).
    """
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpackb(data: bytes, max_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES) -> Any:
    """Decode msgpack bytes produced by :func:`packb` (or any GR00T-protocol peer).

    Args:
        data: the raw message.
        max_bytes: refuse payloads longer than this many bytes before decoding (None = no bound).

    Returns:
        The decoded object; array maps become ``np.ndarray``.

    Raises:
        CodecError: payload too large, not msgpack, trailing bytes, or an invalid array.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise CodecError(f"request of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        return msgpack.unpackb(data, object_hook=_object_hook, raw=False)
    except CodecError:
        raise
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise CodecError(f"not a valid msgpack message: {type(exc).__name__}: {exc}") from exc
