"""msgpack wire codec for the policy server, with numpy arrays (never pickle).

Wire format (the GR00T policy server's, NVIDIA Isaac-GR00T ``MsgSerializer``): a numpy array travels
as the map ``{"__ndarray_class__": True, "as_npy": <bytes of np.save(array, allow_pickle=False)>}``; a
GR00T ``ModalityConfig`` as ``{"__ModalityConfig_class__": True, "as_json": <its fields>}`` (a map in
GR00T N1.6, a JSON string in N1.5; see :func:`modality_config_wire`); every other value is plain
msgpack (maps, lists, str, bytes, int, float, bool, nil). Tuples decode as lists. numpy scalars are
encoded as Python scalars. ModalityConfig maps are decoded as plain maps (this side has no class).

Decoding never unpickles: ``np.load(..., allow_pickle=False)`` refuses object arrays, and the
payload size is checked *before* msgpack touches it (``max_bytes``).
"""

from __future__ import annotations

import io
import json
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


def _object_hook(obj: dict) -> Any:
    if obj.get(NDARRAY_KEY) is True and NPY_KEY in obj:
        raw = obj[NPY_KEY]
        if not isinstance(raw, (bytes, bytearray)):
            raise CodecError(f"'{NPY_KEY}' must be bytes, got {type(raw).__name__}")
        try:
            return np.load(io.BytesIO(raw), allow_pickle=False)
        except Exception as exc:  # ValueError for object arrays / bad headers
            raise CodecError(f"invalid .npy payload: {exc}") from exc
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
