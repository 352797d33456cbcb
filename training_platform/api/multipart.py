"""The dataset upload's multipart/form-data body, streamed: a small incremental parser (`MultipartStream`), the
upload form on top of it (`UploadForm`: the `file` part straight to a staging file, at most TP_MAX_UPLOAD_MB; text
fields in memory) and `read_upload`, which reads a request's body into it. Memory stays bounded by the chunk size;
nothing is parsed as data here (the ingest data job validates the file)."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import IO, Any

from fastapi import HTTPException, Request, status
from starlette.requests import ClientDisconnect

from training_platform.api import schemas
from training_platform.api.errors import ValidationFailed
from training_platform.api.limits import drain
from training_platform.core.settings import Settings
from training_platform.services import datasets as dataset_service

FORM_FIELDS = ("name", "format", "policy", "description")
MAX_FIELD_BYTES = 64 * 1024
FORM_OVERHEAD = 1 << 20  # multipart framing + text fields allowed on top of the file itself


class MultipartError(ValueError):
    pass


_PARAM = re.compile(r';\s*([^=;\s]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')


def content_disposition(value: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for key, raw in _PARAM.findall(";" + value.split(";", 1)[1] if ";" in value else ""):
        raw = raw.strip()
        if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        key = key.lower()
        if key.endswith("*"):  # RFC 5987: charset'lang'percent-encoded
            parts = raw.split("'", 2)
            raw = urllib.parse.unquote(parts[-1], encoding=parts[0] or "utf-8", errors="replace")
            key = key[:-1]
        params[key] = raw
    return params


class MultipartStream:
    """A streaming multipart/form-data parser: `feed` bytes as they arrive, parts are reported through
    `part_begin(name, filename)`, `part_data(bytes)` and `part_end()`; memory stays bounded by the chunk size."""

    MAX_HEADER_BYTES = 16 * 1024

    def __init__(self, boundary: bytes):
        self.dash_boundary = b"--" + boundary
        self.delimiter = b"\r\n--" + boundary
        self.buf = b""
        self.state = "preamble"

    def part_begin(self, name: str, filename: str | None) -> None:
        raise NotImplementedError

    def part_data(self, data: bytes) -> None:
        raise NotImplementedError

    def part_end(self) -> None:
        raise NotImplementedError

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.state == "preamble":
                i = self.buf.find(self.dash_boundary)
                if i < 0:
                    self.buf = self.buf[-(len(self.dash_boundary) - 1) :]
                    return
                self.buf = self.buf[i + len(self.dash_boundary) :]
                self.state = "boundary"
            elif self.state == "boundary":
                if len(self.buf) < 2:
                    return
                if self.buf.startswith(b"--"):
                    self.state, self.buf = "end", b""
                    return
                stripped = self.buf.lstrip(b" \t")  # transport padding
                if len(stripped) < 2:
                    return
                if not stripped.startswith(b"\r\n"):
                    raise MultipartError("malformed multipart boundary")
                self.buf, self.state = stripped[2:], "headers"
            elif self.state == "headers":
                i = self.buf.find(b"\r\n\r\n")
                if i < 0:
                    if len(self.buf) > self.MAX_HEADER_BYTES:
                        raise MultipartError("multipart part headers too large")
                    return
                self._begin(self.buf[:i])
                self.buf, self.state = self.buf[i + 4 :], "data"
            elif self.state == "data":
                i = self.buf.find(self.delimiter)
                if i < 0:
                    keep = len(self.delimiter) - 1
                    if len(self.buf) > keep:
                        self.part_data(self.buf[:-keep])
                        self.buf = self.buf[-keep:]
                    return
                if i:
                    self.part_data(self.buf[:i])
                self.part_end()
                self.buf, self.state = self.buf[i + len(self.delimiter) :], "boundary"
            else:  # end: the epilogue is ignored
                self.buf = b""
                return

    def _begin(self, raw: bytes) -> None:
        headers: dict[str, str] = {}
        for line in raw.decode("utf-8", errors="replace").split("\r\n"):
            if ":" in line:
                key, value = line.split(":", 1)
                headers[key.strip().lower()] = value.strip()
        disposition = headers.get("content-disposition", "")
        if not disposition.lower().startswith("form-data"):
            raise MultipartError("each multipart part needs Content-Disposition: form-data")
        params = content_disposition(disposition)
        if "name" not in params:
            raise MultipartError("a multipart part has no name")
        self.part_begin(params["name"], params.get("filename"))

    def close(self) -> None:
        if self.state != "end":
            raise MultipartError("the multipart body ended before its closing boundary")


class UploadForm(MultipartStream):
    """The upload form: the `file` part goes straight to a staging file under datasets/staging (at most
    `max_bytes`), text fields are kept in memory (64 KB each)."""

    def __init__(self, boundary: bytes, settings: Settings, max_bytes: int):
        super().__init__(boundary)
        self.settings, self.max_bytes = settings, max_bytes
        self.fields: dict[str, str] = {}
        self.filename: str | None = None
        self.suffix: str | None = None
        self.path: Path | None = None
        self.size = 0
        self._file: IO[bytes] | None = None
        self._field: str | None = None
        self._value = bytearray()

    def part_begin(self, name: str, filename: str | None) -> None:
        if name == "file" or filename is not None:
            if name != "file":
                raise ValidationFailed([(name, "unexpected file field; send the dataset as `file`")])
            if self.path is not None:
                raise ValidationFailed([("file", "send one file per upload")])
            try:
                self.suffix = dataset_service.normalize_suffix(filename or "")
            except ValueError as exc:
                raise ValidationFailed([("file", f"{filename!r}: {exc}")]) from None
            self.filename = Path(filename or "").name
            self.path = dataset_service.new_staging_path(self.settings, self.suffix)
            self._file = self.path.open("wb")
            return
        if name not in FORM_FIELDS:
            raise ValidationFailed([(name, f"unknown form field; use file, {', '.join(FORM_FIELDS)}")])
        self._field, self._value = name, bytearray()

    def part_data(self, data: bytes) -> None:
        if self._file is not None:
            self.size += len(data)
            if self.size > self.max_bytes:
                raise UploadTooLarge()
            self._file.write(data)
            return
        self._value += data
        if len(self._value) > MAX_FIELD_BYTES:
            raise ValidationFailed([(self._field or "<form>", f"longer than {MAX_FIELD_BYTES} bytes")])

    def part_end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        elif self._field is not None:
            self.fields[self._field] = self._value.decode("utf-8", errors="replace")
            self._field = None

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class UploadTooLarge(Exception):
    pass


def _too_large(max_bytes: int) -> HTTPException:
    return HTTPException(
        status.HTTP_413_CONTENT_TOO_LARGE,
        detail=f"the upload is larger than the limit of {max_bytes / 2**20:g} MB (TP_MAX_UPLOAD_MB); "
        f"nothing was stored",
    )


def _boundary(content_type: str) -> bytes:
    mime, _, rest = content_type.partition(";")
    if mime.strip().lower() != "multipart/form-data":
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            detail="upload the dataset as multipart/form-data (fields: file, name, format, policy, "
            f"description), got {mime.strip() or 'no Content-Type'!r}",
        )
    params = content_disposition("x;" + rest)
    boundary = params.get("boundary", "")
    if not boundary or len(boundary) > 200:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="multipart/form-data without a valid boundary")
    return boundary.encode("latin-1", errors="replace")


UPLOAD_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "name"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "JSONL, JSON, Parquet or CSV."},
                        "name": {
                            "type": "string",
                            "pattern": schemas.NAME_PATTERN,
                            "maxLength": 128,
                            "description": "Dataset name (yours; an existing name gets a new version).",
                        },
                        "format": {
                            "type": "string",
                            "description": "Row format (default: detected from the first row).",
                        },
                        "policy": {"type": "string", "enum": ["reject", "quarantine"], "default": "reject"},
                        "description": {"type": "string"},
                    },
                }
            }
        },
    }
}


def _form_values(form: UploadForm) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    errors: list[tuple[str, str]] = []
    fields = {k: v.strip() for k, v in form.fields.items()}
    if form.path is None:
        errors.append(("file", "field required: the dataset file"))
    name = fields.get("name", "")
    if not name:
        errors.append(("name", "field required"))
    elif len(name) > 128 or not re.match(schemas.NAME_PATTERN, name):
        errors.append(
            (
                "name",
                "may only contain letters, digits, '_', '.', '-' and must start with a letter or "
                "digit (at most 128 characters)",
            )
        )
    policy = fields.get("policy") or "reject"
    if policy not in ("reject", "quarantine"):
        errors.append(("policy", f"must be reject or quarantine, got {policy!r}"))
    fmt = fields.get("format") or None
    fmt = None if fmt == "auto" else fmt
    from training_platform.data.formats import DATA_FORMATS

    if fmt is not None and fmt not in DATA_FORMATS:
        errors.append(("format", f"unknown format {fmt!r}; use auto or one of {', '.join(DATA_FORMATS)}"))
    description = fields.get("description", "")
    if len(description) > 2000:
        errors.append(("description", "must be at most 2000 characters"))
    errors += [
        (key, "must not contain NUL (\\u0000) characters")  # PostgreSQL stores none
        for key, value in (*fields.items(), ("file", form.filename or ""))
        if "\x00" in value
    ]
    return {"name": name, "policy": policy, "fmt": fmt, "description": description}, errors


async def read_upload(request: Request, settings: Settings) -> tuple[UploadForm, dict[str, Any]]:
    """Stream the request's body into an `UploadForm` (413 over TP_MAX_UPLOAD_MB, 400 for a malformed body, 422
    for bad fields; the staged file is removed on any refusal). The form (with its staged file) and the checked
    text fields: name, policy, fmt (None: detect), description."""
    max_bytes = int(settings.max_upload_mb * 2**20)
    boundary = _boundary(request.headers.get("content-type", ""))
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes + FORM_OVERHEAD:
        if request.headers.get("expect", "").lower() != "100-continue":
            await drain(request.receive)  # bounded: the client then reads the 413 instead of a reset
        raise _too_large(max_bytes)  # refused before a byte is stored
    form = UploadForm(boundary, settings, max_bytes)
    received, more = 0, True
    try:
        while more:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk, more = message.get("body", b""), message.get("more_body", False)
            received += len(chunk)
            if received > max_bytes + FORM_OVERHEAD:
                raise UploadTooLarge()
            form.feed(chunk)
        form.close()
        values, errors = _form_values(form)
        if errors:
            raise ValidationFailed(errors)
    except UploadTooLarge:
        form.discard()
        if more:
            await drain(request.receive)  # bounded: the client then reads the 413 instead of a reset
        raise _too_large(max_bytes) from None
    except MultipartError as exc:
        form.discard()
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=f"malformed multipart body: {exc}") from None
    except BaseException:
        form.discard()
        raise
    return form, values
