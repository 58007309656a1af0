"""Secrets never reach a file or a log: :func:`redact` replaces the value of every field whose name says key, token,
secret or password (``api_key``, ``hf_token``, ``client_secret`` ...), and any string that looks like an API key,
with ``"<redacted>"``. Numbers are left alone (``max_new_tokens: 32`` is no secret). Keys belong in the environment
(``OPENAI_API_KEY`` or the variable an ``api_key_env`` field names)."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(
    r"(?:^|[_\-.])(?:(?:api|access|secret|private|auth)_?key|token|secret|password|passwd|authorization)s?$",
    re.I,
)
_SECRET_VALUE = re.compile(r"^(?:sk-|sk_|hf_|ghp_|xox[bp]-|AIza)[A-Za-z0-9_\-]{16,}$")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(str(name)))


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, strings) with secrets replaced (see the module docstring)."""
    if isinstance(obj, dict):
        secret = {k for k, v in obj.items() if isinstance(v, str) and v and is_secret_name(k)}
        return {k: REDACTED if k in secret else redact(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(redact(v) for v in obj)
    if isinstance(obj, str) and _SECRET_VALUE.match(obj.strip()):
        return REDACTED
    return obj
