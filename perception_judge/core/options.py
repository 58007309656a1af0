"""The one configuration mechanism of jobs and suites: a typed pydantic model per job or suite.

    class PerceptionOptions(Options):
        data: str | None = None
        tau: float = DEFAULT_TAU
        protocols: CommaList = ["pair", "batch", "single"]
        image_control: Literal["none", "mismatched"] = "none"

    opts = PerceptionOptions.parse(config.options, "perception")

Values come from YAML job files and ``--set KEY=VALUE`` overrides (:func:`parse_set`; the value is YAML). Unknown
keys and bad values raise :class:`OptionError` naming ``WHERE.KEY``, the value and what was expected. Training
recipes are not read here: they stay trl configs read by ``TrlParser``.
"""

from __future__ import annotations

from typing import Annotated, Any, Self, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError


class OptionError(ValueError):
    """An unknown option or a bad value; the message names ``WHERE.KEY``."""


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, tuple):
        return list(value)
    return value


CommaList = Annotated[list[str], BeforeValidator(_split_commas)]
"""A list of strings, also given as one comma-separated string (``--set suite.protocols=pair,batch``)."""


class Options(BaseModel):
    """Base of every option model: unknown keys are refused, numbers are accepted where text is expected."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, arbitrary_types_allowed=True)

    @classmethod
    def parse(cls, values: dict[str, Any] | None, where: str, what: str | None = None) -> Self:
        """The options of ``where`` (a suite or job section) from ``values``. None keeps the default of a field
        that cannot hold None. ``what`` words the unknown-key message (default ``option(s) for WHERE``)."""
        values = values or {}
        if unknown := sorted(set(values) - set(cls.model_fields)):
            raise OptionError(
                f"unknown {what or f'option(s) for {where}'} {unknown}; known: {sorted(cls.model_fields)}"
            )
        given = {k: v for k, v in values.items() if v is not None or _admits_none(cls.model_fields[k])}
        try:
            return cls.model_validate(given)
        except ValidationError as e:
            raise OptionError("; ".join(_describe(where, err) for err in e.errors())) from None


def _admits_none(field: Any) -> bool:
    return field.annotation is Any or type(None) in get_args(field.annotation)


def _describe(where: str, err: Any) -> str:
    key = ".".join(str(p) for p in (where, *err["loc"]) if p != "")
    return f"{key}: {err['msg']} (got {err['input']!r})"


def parse_set(item: str) -> tuple[list[str], Any]:
    """``A.B=VALUE`` -> (``["A", "B"]``, VALUE read as YAML; text that is not YAML stays text)."""
    import yaml

    key, sep, raw = item.partition("=")
    path = [p.strip() for p in key.split(".")]
    if not sep or not all(path):
        raise OptionError(f"--set {item!r}: expected KEY=VALUE (a dotted KEY such as SUITE.OPTION)")
    try:
        return path, yaml.safe_load(raw)
    except yaml.YAMLError:
        return path, raw


__all__ = ["CommaList", "OptionError", "Options", "parse_set"]
