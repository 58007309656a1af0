"""Judge backends behind one interface (:class:`perception_judge.evaluation.base.JudgeBackend`).

``load_backend(spec)`` builds one from a spec:

* a string ``KIND:TARGET``: ``hf:/path/to/model``, ``vllm:/path/to/model``, ``openai:MODEL`` (server from
  ``$OPENAI_BASE_URL``), ``scripted:constant`` / ``scripted:random`` / ``scripted:package.module:function``;
* a mapping with ``kind`` (or ``backend``) and the keyword arguments of that backend's class, e.g.
  ``{"kind": "hf", "model": "runs/x/checkpoint-20", "adapter": null, "batch_size": 8, "dtype": "float32",
  "pixel_policy": {"mode": "fixed", "size": 448}, "think_prefix": "auto"}``.

Backend modules import their heavy dependencies (torch, transformers, vLLM, the teacher client) only when
built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.evaluation.base import JudgeBackend

KINDS = ("hf", "vllm", "openai", "scripted")

# the model-path argument of each kind, for the "KIND:TARGET" shorthand
_TARGET_KEY = {"hf": "model", "vllm": "model", "openai": "model", "scripted": "fn"}


def parse_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """Normalise a backend spec into a dict with ``kind`` (see the module docstring)."""
    if isinstance(spec, str):
        kind, sep, target = spec.partition(":")
        if not sep or kind not in KINDS or not target:
            raise ValueError(
                f"bad backend spec {spec!r}: expected KIND:TARGET with KIND one of {', '.join(KINDS)} "
                "(e.g. hf:/path/to/model, openai:gpt-4o, scripted:constant)"
            )
        return {"kind": kind, _TARGET_KEY[kind]: target}
    d = dict(spec)
    kind = d.pop("kind", None) or d.pop("backend", None)
    if kind not in KINDS:
        raise ValueError(f"backend spec needs kind one of {', '.join(KINDS)}, got {kind!r}")
    return {"kind": kind, **d}


_CLASSES = {
    "hf": "perception_judge.evaluation.backends.hf:HFBackend",
    "vllm": "perception_judge.evaluation.backends.vllm:VLLMBackend",
    "openai": "perception_judge.evaluation.backends.openai:OpenAIBackend",
    "scripted": "perception_judge.evaluation.backends.scripted:ScriptedBackend",
}


def backend_class(kind: str) -> type[JudgeBackend]:
    """The backend class of a kind (imported on first use; the engines themselves load only when it is built)."""
    import importlib

    if kind not in _CLASSES:
        raise ValueError(f"unknown backend kind {kind!r}; choose one of {', '.join(KINDS)}")
    module, name = _CLASSES[kind].split(":")
    return getattr(importlib.import_module(module), name)


def backend_options(kind: str) -> set[str]:
    """The keys a backend kind's block may hold (its constructor's parameters; ``fn`` for ``scripted``)."""
    import inspect

    params = inspect.signature(backend_class(kind).__init__).parameters
    return {n for n, p in params.items() if n != "self" and p.kind is not p.VAR_KEYWORD}


def load_backend(spec: str | Mapping[str, Any], **overrides: Any) -> JudgeBackend:
    """Build a backend from a spec; ``overrides`` win over the spec's keys (``None`` values are ignored). A key
    the kind does not take is an error naming it (``scripted`` ignores other kinds' keys)."""
    d = parse_spec(spec)
    d.update({k: v for k, v in overrides.items() if v is not None})
    kind = d.pop("kind")
    policy = d.get("pixel_policy")
    if isinstance(policy, Mapping):
        d["pixel_policy"] = PixelPolicy(**policy)
    if kind == "scripted":
        from perception_judge.evaluation.backends.scripted import ScriptedBackend, scripted_fn

        fn = d.pop("fn")
        if isinstance(fn, str):
            d.setdefault("label", f"scripted-{fn}")
            fn = scripted_fn(fn)
        return ScriptedBackend(fn, **{k: v for k, v in d.items() if k in ("pixel_policy", "label")})
    unknown = set(d) - backend_options(kind)
    if unknown:
        raise ValueError(
            f"backend {kind!r} has no option(s) {sorted(unknown)}; it takes {sorted(backend_options(kind))}"
        )
    return backend_class(kind)(**d)


__all__ = ["KINDS", "backend_class", "backend_options", "load_backend", "parse_spec"]
