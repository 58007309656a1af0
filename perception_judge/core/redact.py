"""Secrets never reach a file or a log: :func:`redact` replaces the value of every field whose name says key, token,
secret or password (``api_key``, ``hf_token``, ``client_secret`` ...), any string that looks like an API key, and in
every URL inside a string the user info (``http://user:secret@host``) and the values of secret-looking query
parameters (``?api_key=``, ``key=``, ``token=``, ``access_token=``, ``secret=``, ``password=``, ``sig=``,
``signature=``), with ``"<redacted>"``. Numbers are left alone (``max_new_tokens: 32`` is no secret). Keys belong in
the environment (``OPENAI_API_KEY`` or the variable an ``api_key_env`` field names). :class:`RedactingFilter` does
the same to log records."""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(  # max_tokens, num_tokens: counts, not secrets
    r"^(?!(?:max|min|num)_)(?:.*[_\-.])?(?:(?:api|access|secret|private|auth)_?key|token|secret|password|passwd"
    r"|authorization)s?$",
    re.I,
)
_SECRET_VALUE = re.compile(r"^(?:sk-|sk_|hf_|ghp_|xox[bp]-|AIza)[A-Za-z0-9_\-]{16,}$")
_SECRET_PARAMS = {"key", "apikey", "sig", "signature", "auth", "code", "credential", "credentials"}
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
_USERINFO = re.compile(r"^([^:/?#]+://)[^/?#@]*@")
_PARAM = re.compile(r"([?&;])([^=&#;]+)=([^&#;]*)")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(str(name)))


def _param(m: re.Match[str]) -> str:
    name = m.group(2)
    secret = is_secret_name(name) or name.strip().lower().replace("-", "_") in _SECRET_PARAMS
    return f"{m.group(1)}{name}={REDACTED}" if secret and m.group(3) else m.group(0)


def redact_url(url: str) -> str:
    """``url`` with its user info and the values of secret-looking query parameters replaced."""
    return _PARAM.sub(_param, _USERINFO.sub(rf"\g<1>{REDACTED}@", url))


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    return _URL.sub(lambda m: redact_url(m.group()), text) if "://" in text else text


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, strings) with secrets replaced (see the module docstring)."""
    if isinstance(obj, dict):
        secret = {k for k, v in obj.items() if isinstance(v, str) and v and is_secret_name(k)}
        return {k: REDACTED if k in secret else redact(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(redact(v) for v in obj)
    if isinstance(obj, str):
        return REDACTED if _SECRET_VALUE.match(obj.strip()) else redact_text(obj)
    return obj


class RedactingFilter(logging.Filter):
    """Redacts the URLs of every record of the loggers it is added to (their message is formatted here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "://" in message:
            record.msg, record.args = redact_text(message), ()
        return True


def redact_logs(*names: str) -> None:
    """Add a :class:`RedactingFilter` to the loggers ``names`` (once each)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
