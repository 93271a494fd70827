"""msgpack wire codec for the policy server, with numpy arrays (never pickle).

Wire format (the GR00T policy server's, NVIDIA Isaac-GR00T ``MsgSerializer``): a numpy array travels
as the map ``{"__ndarray_class__": True, "as_npy": <bytes of np.save(array, allow_pickle=False)>}``; a
GR00T ``ModalityConfig`` as ``{"__ModalityConfig_class__": True, "as_json": <its fields>}`` (a map in
GR00T N1.6, a JSON string in N1.5; see :func:`modality_config_wire`); every other value is plain
msgpack (maps, lists, str, bytes, int, float, bool, nil). Tuples decode as lists. numpy scalars are
encoded as Python scalars. ModalityConfig maps are decoded as plain maps (this side has no class).

Decoding never unpickles: :func:`load_npy` refuses object arrays (as ``np.load(..., allow_pickle=False)``,
which it falls back to for unusual headers), the payload size is checked *before* msgpack touches
it (``max_bytes``), and at most ``max_arrays`` arrays are built per message (the parse stops at the
next one). :func:`read_request_token` reads a request's ``api_token`` without building anything else,
so a server can authenticate before it decodes.
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
#: Default upper bound of the numpy arrays in one request (a GR00T observation carries one per camera
#: and one per state key: a few, at most a few dozen).
DEFAULT_MAX_ARRAYS = 256
#: The request field that carries the api token (GR00T's ``PolicyClient``/``BaseInferenceClient`` add it
#: to the top-level request map, after ``endpoint`` and ``data``).
API_TOKEN_FIELD = "api_token"
#: Longest key or token :func:`read_request_token` reads (anything longer is not a token).
_MAX_TOKEN_CHARS = 4096


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


def unpackb(data: bytes, max_bytes: int | None = DEFAULT_MAX_REQUEST_BYTES, max_arrays: int | None = None) -> Any:
    """Decode msgpack bytes produced by :func:`packb` (or any GR00T-protocol peer).

    Args:
        data: the raw message.
        max_bytes: refuse payloads longer than this many bytes before decoding (None = no bound).
        max_arrays: refuse a message holding more numpy arrays than this; the parse stops at the first
            array over the bound, so at most ``max_arrays`` are built (None = no bound).

    Returns:
        The decoded object; array maps become ``np.ndarray``.

    Raises:
        CodecError: payload too large, too many arrays, not msgpack, trailing bytes, or an invalid array.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise CodecError(f"request of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    hook = _object_hook
    if max_arrays is not None:
        built = 0

        def hook(obj: dict) -> Any:
            nonlocal built
            if obj.get(NDARRAY_KEY) is True and NPY_KEY in obj:
                built += 1
                if built > max_arrays:
                    raise CodecError(f"request holds more than {max_arrays} arrays, the limit of this server")
            return _object_hook(obj)
    try:
        return msgpack.unpackb(data, object_hook=hook, raw=False)
    except CodecError:
        raise
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise CodecError(f"not a valid msgpack message: {type(exc).__name__}: {exc}") from exc


class _Missing:
    """:func:`read_request_token`'s answer for a request without an ``api_token`` field."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def read_request_token(data: bytes | memoryview) -> Any:
    """The ``api_token`` of a request, read without decoding the rest of it.

    The top-level map's keys are read one by one and every value but the token's is skipped in C
    (``msgpack.Unpacker.skip``): no array, map, list or string of ``data`` is built, whatever its size
    or count. A key or token longer than 4096 characters or bytes, or a non-empty list or map in their
    place, is refused unbuilt (the Unpacker's length limits).

    Returns:
        The token (a ``str``; another type when the peer sent one, e.g. an int), or :data:`MISSING`
        when the request has no ``api_token`` field.

    Raises:
        CodecError: empty, not a msgpack map, truncated, or a key or token too long to be one.
    """
    if not len(data):
        raise CodecError("not a valid msgpack message: the request is empty")
    first = data[0]
    if first == 0xC1:  # the one byte msgpack never uses
        raise CodecError("not a valid msgpack message: it starts with 0xc1, which is no msgpack type")
    if not (0x80 <= first <= 0x8F or first in (0xDE, 0xDF)):  # fixmap, map 16, map 32
        raise CodecError("request must be a map {'endpoint': str, 'data': ..., 'api_token': str}")
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(data), max_str_len=_MAX_TOKEN_CHARS,
                                max_bin_len=_MAX_TOKEN_CHARS, max_array_len=0, max_map_len=0, max_ext_len=0)
    token: Any = MISSING
    try:
        unpacker.feed(data)
        for _ in range(unpacker.read_map_header()):
            if unpacker.unpack() == API_TOKEN_FIELD:
                token = unpacker.unpack()
            else:
                unpacker.skip()
    except Exception as exc:  # OutOfData, FormatError, ValueError (limits), UnicodeDecodeError, ...
        raise CodecError(f"not a valid msgpack message: {type(exc).__name__}: {exc} (a request is a map "
                         "{'endpoint': str, 'data': ..., 'api_token': str})") from exc
    return token
