"""The one configuration mechanism of jobs and suites (docs/architecture.md "Configuration"): a typed pydantic model
per job or suite, which is also the runtime configuration of the code it drives.

    class ExportOptions(Options):
        seed: int = 0
        '''seed of the slot permutations'''      # documented: the flag --seed, this text its help
        chunk_rows: int = 256                     # undocumented: a config-file / --set key only

Flags, precedence and errors (:class:`OptionError`): docs/architecture.md. A bool flag is a switch (``--x/--no-x``
unless it defaults to False), a Literal lists its choices, a list repeats, a dict takes ``KEY=VALUE`` entries (added
to the mapping below it).
"""

from __future__ import annotations

import argparse
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo

from perception_judge.core.redact import redact


class OptionError(ValueError):
    """An unknown option or a bad value; the message names ``WHERE.KEY``, the value and what is allowed."""


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, tuple):
        return list(value)
    return value


CommaList = Annotated[list[str], BeforeValidator(_split_commas)]
"""A list of strings, also given as one comma-separated string (``--set suite.protocols=pair,batch``)."""


@dataclass(frozen=True)
class Flag:
    """``Annotated`` metadata of a field's flag: its name (default ``--key-name``; no dashes: positional), metavar."""

    name: str | None = None
    metavar: str | None = None


class Why(str):
    """``Annotated`` metadata: why a field's constraint holds; its errors say it after the problem."""


class Options(BaseModel):
    """Base of every option model: unknown keys are refused, numbers are accepted where text is expected, an
    attribute docstring documents its field (and makes it a flag)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, arbitrary_types_allowed=True)
    model_config["use_attribute_docstrings"] = True

    @model_validator(mode="before")
    @classmethod
    def _keep_sub_defaults(cls, data: Any) -> Any:
        """A partial mapping for a sub-model field keeps the other values of the field's default."""
        if isinstance(data, dict):
            for name, value in data.items():
                default = cls.model_fields[name].default if name in cls.model_fields else None
                if isinstance(default, BaseModel) and isinstance(value, dict):
                    data = {**data, name: {**default.model_dump(), **value}}
        return data

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None, where: str = "", what: str | None = None) -> Self:
        """The options of ``where`` (a job, section or suite) from ``values``. None keeps the default of a field that
        cannot hold None. ``what`` words the unknown-key message (default ``option``)."""
        values = {} if values is None else values
        if isinstance(values, Mapping):
            known = cls.model_fields
            values = {k: v for k, v in values.items() if v is not None or k not in known or _admits(known[k])}
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            raise OptionError("; ".join(_describe(cls, where, err, what) for err in e.errors())) from None

    @classmethod
    def check_keys(cls, values: Mapping[str, Any] | None, where: str = "", what: str | None = None) -> None:
        """Only the keys of ``values``, as :meth:`parse` words an unknown one: options kept for later (a suite the
        job does not run), whose requirements wait for the job that uses them."""
        try:
            cls.model_validate(values or {})
        except ValidationError as e:
            if bad := [err for err in e.errors() if err["type"] == "extra_forbidden"]:
                raise OptionError("; ".join(_describe(cls, where, err, what) for err in bad)) from None


def _strip_none(annotation: Any) -> Any:
    """``X | None`` -> X (other annotations as they are)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _admits(field: FieldInfo) -> bool:
    """Whether a field may hold None."""
    return field.annotation is Any or type(None) in get_args(field.annotation)


def _section(field: FieldInfo) -> type[Options] | None:
    """The model of a sub-model field, or None."""
    ann = _strip_none(field.annotation)
    return ann if isinstance(ann, type) and issubclass(ann, Options) else None


def _field_at(model: type[BaseModel], loc: Iterable[Any]) -> tuple[type[BaseModel] | None, FieldInfo | None]:
    """(the model holding the last key of ``loc``, that key's field), following sub-model fields."""
    field = None
    for part in loc:
        if field is not None:
            model = _section(field)  # type: ignore[assignment]
        field = model.model_fields.get(str(part)) if model is not None else None
        if field is None:
            return model, None
    return model, field


def _flag_meta(field: FieldInfo) -> Flag:
    return next((m for m in field.metadata if isinstance(m, Flag)), Flag())


def flag_name(field: FieldInfo, key: str) -> str:
    """The flag of a field named ``key``: its :class:`Flag` name, else ``--key-name``."""
    return _flag_meta(field).name or "--" + key.rsplit(".", 1)[-1].replace("_", "-")


def _shown(key: str, value: Any) -> str:
    text = repr(redact({key: value})[key])
    return text if len(text) <= 80 else text[:77] + "..."


def problem(key: str, what: str, value: Any = ...) -> OptionError:
    """The one error, ``WHERE.KEY: what is wrong (got VALUE)`` (the value redacted and shortened)."""
    got = "" if value is ... else f" (got {_shown(key.rsplit('.', 1)[-1], value)})"
    return OptionError(f"{key}: {what}{got}")


def _describe(model: type[BaseModel], where: str, err: Any, what: str | None) -> str:
    loc = [str(p) for p in err["loc"]]
    key = ".".join(p for p in (where, *loc) if p) or model.__name__
    holder, field = _field_at(model, loc)
    if err["type"] == "extra_forbidden":
        known = ", ".join(sorted(holder.model_fields)) if holder is not None else ""
        unknown = problem(key, f"unknown {what or 'option'}", err["input"])
        return f"{unknown}; known: {known}" if known else str(unknown)
    if err["type"] == "missing":
        name = flag_name(field, loc[-1]) if field is not None and field.description else ""
        hint = f" ({'flag' if name.startswith('-') else 'argument'} {name})" if name else ""
        return f"{key}: required, not given{hint}"
    msg = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    why = "".join(f": {m}" for m in (field.metadata if field is not None else ()) if isinstance(m, Why))
    return str(problem(key, msg + why, err["input"]))


def key_values(
    entries: Iterable[str],
    where: str,
    metavar: str = "KEY=VALUE",
    split: bool = True,
    default: str | None = None,
) -> dict[str, str]:
    """The one ``KEY=VALUE`` parser: repeatable entries as a mapping of text. ``split``: several comma-separated in
    one entry when every piece has a ``=`` (or a bare ``KEY`` takes ``default``, when one is given)."""
    out: dict[str, str] = {}
    for entry in entries:
        pieces = entry.split(",") if split else [entry]
        for piece in pieces if default is not None or all("=" in p for p in pieces) else [entry]:
            key, sep, value = piece.partition("=")
            if not key.strip() or not (sep or default is not None):
                raise OptionError(f"{where} {entry!r}: expected {metavar}")
            out[key.strip()] = value.strip() if sep else str(default)
    return out


def parse_set(item: str) -> tuple[list[str], Any]:
    """``A.B=VALUE`` -> (``["A", "B"]``, VALUE read as YAML; text that is not YAML stays text)."""
    import yaml

    expected = "KEY=VALUE (a dotted KEY such as SECTION.OPTION)"
    ((key, raw),) = key_values([item], "--set", expected, split=False).items()
    if not all(path := [p.strip() for p in key.split(".")]):
        raise OptionError(f"--set {item!r}: expected {expected}")
    try:
        return path, yaml.safe_load(raw)
    except yaml.YAMLError:
        return path, raw


def _leaves(model: type[Options], prefix: str = "") -> Iterator[tuple[str, FieldInfo, type[Options] | None]]:
    """(dotted key, field, section model or None) of every documented field, sections before their fields."""
    for name, field in model.model_fields.items():
        if field.description:
            section = _section(field)
            yield prefix + name, field, section
            if section is not None:
                yield from _leaves(section, f"{prefix}{name}.")


def _default_text(field: FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    if default is None or default is False or default == [] or default == {}:
        return ""
    if isinstance(default, dict):
        default = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in default.items())
    elif isinstance(default, list | tuple):
        default = ",".join(map(str, default))
    return f" (default {default})"


def _argument(field: FieldInfo, key: str) -> tuple[list[str], dict[str, Any]]:
    """The argparse flag of a documented field: (option strings, keyword arguments)."""
    ann, meta = _strip_none(field.annotation), _flag_meta(field)
    help_ = field.description or ""
    if "default" not in help_ and not field.is_required():
        help_ += _default_text(field)
    kw: dict[str, Any] = {"dest": key, "default": None, "help": help_.replace("%", "%%")}
    name = flag_name(field, key)
    upper = name.lstrip("-").replace("-", "_").upper()
    if not name.startswith("-"):
        return [key], {"nargs": "?", "help": kw["help"], "metavar": meta.metavar or upper}
    if ann is bool:
        kw["action"] = "store_true" if field.default is False else argparse.BooleanOptionalAction
    elif get_origin(ann) is Literal:
        kw["metavar"] = "{" + ",".join(map(str, get_args(ann))) + "}"
    elif get_origin(ann) in (list, dict):
        kw |= {
            "action": "append",
            "metavar": meta.metavar or ("KEY=VALUE" if get_origin(ann) is dict else upper),
        }
    else:
        kw["metavar"] = meta.metavar or upper
    return [name], kw


def add_flags(parser: argparse.ArgumentParser, model: type[Options], *, config: bool = True) -> None:
    """Add ``--config FILE`` and ``--set KEY=VALUE`` (unless ``config=False``) and a flag per documented field of
    ``model`` to ``parser``, a section's flags in an argument group (see the module docstring). A flag's dest is
    its dotted key and its default None, so :func:`options_from_args` sees which flags were given."""
    if config:
        example = next((k for k, _, s in _leaves(model) if s is None), "KEY")
        help_ = "YAML file of options (sections and keys as in --set); --set and flags override it"
        parser.add_argument("--config", metavar="FILE", help=help_)
        help_ = f"set any option by its dotted key to a YAML value, e.g. --set {example}=VALUE (repeatable; later "
        help_ += "wins). Precedence: defaults < --config < --set < flags"
        parser.add_argument(
            "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help_
        )
    groups: dict[str, Any] = {}
    for key, field, section in _leaves(model):
        if section is not None:
            groups[key] = parser.add_argument_group(f"{key} (config section {key!r})", field.description)
            continue
        target = groups.get(key.rpartition(".")[0], parser)
        flags, kw = _argument(field, key)
        target.add_argument(*flags, **kw)


def given_flags(model: type[Options], args: argparse.Namespace) -> dict[str, Any]:
    """``{dotted key: value}`` of the flags of ``model`` given in ``args`` (dict flags as mappings)."""
    out = {}
    for key, field, section in _leaves(model):
        if section is None and (value := getattr(args, key, None)) is not None:
            if get_origin(_strip_none(field.annotation)) is dict:
                value = key_values(value, flag_name(field, key), _flag_meta(field).metavar or "KEY=VALUE")
            out[key] = value
    return out


def read_config(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """The mapping of options a YAML file holds (``what`` names the file in errors)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise OptionError(f"{what} {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise OptionError(f"{what} {str(p)!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise OptionError(f"{what} {str(p)!r}: expected a mapping of options, got {type(data).__name__}")
    return data


def _put(data: dict[str, Any], path: list[str], value: Any, add: bool = False) -> None:
    """Set ``data[path[0]][path[1]]... = value`` (a mapping ``value`` with ``add`` is added to the one there)."""
    for i, part in enumerate(path[:-1]):
        if data.get(part) is None:
            data[part] = {}
        elif not isinstance(data[part], dict):
            raise OptionError(f"{'.'.join(path[: i + 1])}: is {data[part]!r}, not a mapping of options")
        data = data[part]
    old = data.get(path[-1])
    data[path[-1]] = {**old, **value} if add and isinstance(old, dict) else value


def resolve_options(
    model: type[Options],
    where: str = "",
    config: str | Path | None = None,
    sets: Iterable[str] = (),
    flags: Mapping[str, Any] | None = None,
) -> Any:
    """The options of ``model`` from its defaults, a YAML ``config`` file, ``--set`` items and ``flags``
    (``{dotted key: value}``), in that order of precedence (the module docstring); raises :class:`OptionError`."""
    data = read_config(config) if config else {}
    for item in sets:
        _put(data, *parse_set(item))
    for key, value in (flags or {}).items():
        _put(data, key.split("."), value, add=isinstance(value, dict))
    return model.parse(data, where)


def options_from_args(model: type[Options], args: argparse.Namespace, where: str = "") -> Any:
    """The options of a command line built with :func:`add_flags` (precedence: the module docstring)."""
    config, sets = getattr(args, "config", None), getattr(args, "sets", None) or ()
    return resolve_options(model, where, config, sets, given_flags(model, args))
