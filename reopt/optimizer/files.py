"""Files the optimizer keeps: written whole or not at all, read back with errors that name them."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, flushed to disk and
    renamed over ``path``: a write that fails part way leaves the previous file as it was. Raises
    ``OSError``; the caller words it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_json(path: Path, error: type[Exception], what: str, missing: str) -> Any:
    """The JSON value in the file at ``path``; ``error`` naming the file if it is missing
    (``missing`` says what to do), unreadable, not UTF-8 or not JSON. ``what`` names the kind of
    file, as in "an optimizer state"."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(missing) from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path} is not {what}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path} is cut short or not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                    f"it is not a usable {what.split(' ', 1)[1]}") from None


def check_envelope(data: Any, path: Path, error: type[Exception], file_format: str, version: int, kind: str) -> None:
    """``error`` naming the file unless ``data`` names ``file_format`` at ``version``; ``kind``
    names the format for a person, as in "optimizer state"."""
    if not isinstance(data, dict) or data.get("format") != file_format:
        raise error(f"{path} is not a reopt {kind} (no \"format\": \"{file_format}\")")
    if data.get("version") != version:
        raise error(f"{path} holds version {data.get('version')!r} of the {kind} format; "
                    f"this reopt reads version {version}")
