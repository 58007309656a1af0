"""Judge backends behind one interface (:class:`perception_judge.evaluation.base.JudgeBackend`).

``load_backend(spec)`` builds one from a string ``KIND:TARGET`` (``hf:/path/to/model``, ``vllm:/path/to/model``,
``openai:MODEL`` with the server from ``$OPENAI_BASE_URL``, ``scripted:constant`` / ``scripted:random`` /
``scripted:package.module:function``) or from a mapping with ``kind`` (or ``backend``) and that kind's options,
e.g. ``{"kind": "hf", "model": "runs/x/checkpoint-20", "batch_size": 8, "pixel_policy": {"size": 448}}``.

A kind's options are the parameters of its class's constructor, checked as a typed
:class:`~perception_judge.core.options.Options` model (:func:`backend_model`). Backend modules import their heavy
dependencies (torch, transformers, vLLM) only when a backend is built.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import create_model

from perception_judge.core.options import Options
from perception_judge.evaluation.base import JudgeBackend

_CLASSES = {
    "hf": "perception_judge.evaluation.backends.hf:HFBackend",
    "vllm": "perception_judge.evaluation.backends.vllm:VLLMBackend",
    "openai": "perception_judge.evaluation.backends.openai:OpenAIBackend",
    "scripted": "perception_judge.evaluation.backends.scripted:ScriptedBackend",
}
KINDS = tuple(_CLASSES)


def parse_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """Normalise a backend spec into a dict with ``kind`` (see the module docstring)."""
    if isinstance(spec, str):
        kind, sep, target = spec.partition(":")
        if not sep or kind not in KINDS or not target:
            raise ValueError(
                f"bad backend spec {spec!r}: expected KIND:TARGET with KIND one of {', '.join(KINDS)} "
                "(e.g. hf:/path/to/model, openai:gpt-4o, scripted:constant)"
            )
        return {"kind": kind, "fn" if kind == "scripted" else "model": target}
    d = dict(spec)
    kind = d.pop("kind", None) or d.pop("backend", None)
    if kind not in KINDS:
        raise ValueError(f"backend spec needs kind one of {', '.join(KINDS)}, got {kind!r}")
    return {"kind": kind, **d}


def backend_class(kind: str) -> type[JudgeBackend]:
    """The backend class of a kind (imported on first use; the engines themselves load only when it is built)."""
    if kind not in _CLASSES:
        raise ValueError(f"unknown backend kind {kind!r}; choose one of {', '.join(KINDS)}")
    module, name = _CLASSES[kind].split(":")
    return getattr(importlib.import_module(module), name)


@functools.cache
def backend_model(kind: str) -> type[Options]:
    """The typed options of a kind: one field per constructor parameter, with its type and default (a required
    parameter defaults to None here; the constructor still asks for it)."""
    init = backend_class(kind).__init__
    hints = typing.get_type_hints(init)
    fields = {
        name: (hints.get(name, Any), None if p.default is p.empty else p.default)
        for name, p in inspect.signature(init).parameters.items()
        if name != "self" and p.kind is not p.VAR_KEYWORD
    }
    return create_model(f"{kind.capitalize()}BackendOptions", __base__=Options, **fields)


def backend_options(kind: str) -> set[str]:
    """The keys a backend kind's block may hold (its constructor's parameters)."""
    return set(backend_model(kind).model_fields)


def backend_kwargs(spec: str | Mapping[str, Any], **overrides: Any) -> tuple[str, dict[str, Any]]:
    """(kind, checked constructor arguments) of a spec; ``overrides`` win over the spec's keys (``None`` values
    are ignored). A key the kind does not take is an error naming it (``scripted`` ignores other kinds' keys); a
    bad value is an error naming ``backend.KEY``."""
    d = parse_spec(spec)
    d.update({k: v for k, v in overrides.items() if v is not None})
    kind = d.pop("kind")
    takes = backend_options(kind)
    if kind == "scripted":
        d = {k: v for k, v in d.items() if k in takes}
    elif unknown := sorted(set(d) - takes):
        raise ValueError(f"backend {kind!r} has no option(s) {unknown}; it takes {sorted(takes)}")
    opts = backend_model(kind).parse(d, "backend")
    return kind, {k: getattr(opts, k) for k in opts.model_fields_set}


def load_backend(spec: str | Mapping[str, Any], **overrides: Any) -> JudgeBackend:
    """Build a backend from a spec (:func:`backend_kwargs`)."""
    kind, kwargs = backend_kwargs(spec, **overrides)
    return backend_class(kind)(**kwargs)
