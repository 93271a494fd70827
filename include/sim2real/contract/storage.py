"""Bytes in and out of ``s3://`` URIs and local/EFS paths, the same way for both.

Used by the trainer (checkpoints, TensorBoard events, manifest), the evaluator (report) and
the ONNX export. S3 goes through boto3, which reads ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``
itself (botocore's service-specific endpoint configuration), so in the local sandbox every call
lands on moto without any code here knowing about it.

Local writes are atomic: the bytes go to a temporary file in the destination directory, are
fsync'ed, then ``os.replace``'d onto the final name, so a reader sees either nothing or the
complete file. An S3 ``PutObject`` is atomic by itself (an object is visible only once fully
uploaded).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Iterator
from urllib.parse import urlparse

_CHUNK = 1024 * 1024


def is_s3(uri: str) -> bool:
    """True when ``uri`` starts with ``s3://``."""
    return str(uri).startswith("s3://")


def _local(uri: str) -> str:
    uri = str(uri)
    if uri.startswith("file://"):
        return urlparse(uri).path
    return uri


#: S3 error codes that mean "no object at that key" (GetObject answers NoSuchKey; HeadObject, whose answer has no
#: body, the HTTP status 404; Amazon S3 API Reference, "GetObject" / "HeadObject").
MISSING_OBJECT_CODES = ("NoSuchKey", "404", "NotFound")


def split_s3(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into ``(bucket, key)``.

    :raises ValueError: when ``uri`` is not an ``s3://`` URI or has no bucket.
    """
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URI with a bucket: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def join(base: str, *parts: str) -> str:
    """Join path segments onto a URI or local path with ``/`` (no ``os.path`` semantics for S3).

    ``join("s3://b/runs/k/checkpoints/", "agent_000001.pt")`` → ``s3://b/runs/k/checkpoints/agent_000001.pt``.
    """
    out = str(base)
    for part in parts:
        part = str(part).lstrip("/")
        if not part:
            continue
        out = out if out.endswith("/") else out + "/"
        out += part
    return out


def _client():
    import boto3  # imported lazily: the module is importable without boto3 for local-only use

    return boto3.client("s3")


def read_bytes(uri: str) -> bytes:
    """Return the whole content of ``uri`` (``s3://bucket/key`` or a local path).

    :raises FileNotFoundError: when the object/file does not exist (S3 ``NoSuchKey``/404 is mapped to it).
    :raises botocore.exceptions.ClientError: for any other S3 error (access denied, no bucket...).
    """
    if is_s3(uri):
        from botocore.exceptions import ClientError

        bucket, key = split_s3(uri)
        try:
            return _client().get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in MISSING_OBJECT_CODES:
                raise FileNotFoundError(f"no such object: {uri}") from err
            raise
    with open(_local(uri), "rb") as fh:
        return fh.read()


def write_bytes(uri: str, data: bytes) -> str:
    """Write ``data`` to ``uri`` atomically (local: tmp + fsync + rename, parents created; S3: one PutObject).

    :return: ``uri``.
    """
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _client().put_object(Bucket=bucket, Key=key, Body=data)
        return uri
    path = _local(uri)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return uri


def upload_file(local_path: str, uri: str) -> str:
    """Copy the local file ``local_path`` to ``uri`` (S3: managed upload, multipart above 8 MiB,
    visible only when complete; local: atomic copy). :return: ``uri``."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _client().upload_file(local_path, bucket, key)
        return uri
    if os.path.abspath(_local(uri)) == os.path.abspath(local_path):
        return uri
    with open(local_path, "rb") as fh:
        return write_bytes(uri, fh.read())


def download_file(uri: str, local_path: str) -> str:
    """Copy ``uri`` to the local file ``local_path`` (parents created). :return: ``local_path``.

    :raises FileNotFoundError: when ``uri`` does not exist.
    """
    os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
    if is_s3(uri):
        from botocore.exceptions import ClientError

        bucket, key = split_s3(uri)
        try:
            _client().download_file(bucket, key, local_path)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in MISSING_OBJECT_CODES:
                raise FileNotFoundError(f"no such object: {uri}") from err
            raise
        return local_path
    write_bytes(local_path, read_bytes(uri))
    return local_path


def exists(uri: str) -> bool:
    """True when the object/file ``uri`` exists."""
    if is_s3(uri):
        from botocore.exceptions import ClientError

        bucket, key = split_s3(uri)
        try:
            _client().head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in MISSING_OBJECT_CODES:
                return False
            raise
    return os.path.isfile(_local(uri))


def list_names(prefix_uri: str) -> list[str]:
    """Names (relative to ``prefix_uri``, which is treated as a directory) of the objects/files
    directly under it, sorted. Sub-directories are not descended into. A missing prefix → ``[]``."""
    if is_s3(prefix_uri):
        bucket, key = split_s3(prefix_uri)
        if key and not key.endswith("/"):
            key += "/"
        names: list[str] = []
        paginator = _client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=key, Delimiter="/"):
            for obj in page.get("Contents", []):
                names.append(obj["Key"][len(key):])
        return sorted(n for n in names if n)
    path = _local(prefix_uri)
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))


def _iter_chunks(uri: str) -> Iterator[bytes]:
    if is_s3(uri):
        from botocore.exceptions import ClientError

        bucket, key = split_s3(uri)
        try:
            body = _client().get_object(Bucket=bucket, Key=key)["Body"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in MISSING_OBJECT_CODES:
                raise FileNotFoundError(f"no such object: {uri}") from err
            raise
        yield from body.iter_chunks(_CHUNK)
        return
    with open(_local(uri), "rb") as fh:
        while chunk := fh.read(_CHUNK):
            yield chunk


def sha256_uri(uri: str) -> str:
    """Hex sha256 of the bytes of ``uri`` (s3:// or local), streamed in 1 MiB chunks.

    :raises FileNotFoundError: when ``uri`` does not exist.
    """
    digest = hashlib.sha256()
    for chunk in _iter_chunks(uri):
        digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: str) -> str:
    """Hex sha256 of a local file, streamed (alias of :func:`sha256_uri` for local paths)."""
    return sha256_uri(path)
