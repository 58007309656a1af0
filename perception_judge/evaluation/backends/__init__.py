"""Judge backends behind one interface (:class:`perception_judge.evaluation.base.JudgeBackend`), each kind's options
its class's ``Options`` model (docs/evaluation.md §1). :class:`BackendSpec` is the plan's backend, resolved once;
:func:`load_backend` builds one from ``KIND:TARGET`` or a mapping. Backend modules import their heavy dependencies
(torch, transformers, vLLM) only when a backend is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perception_judge.core.images import PixelPolicy
from perception_judge.core.options import Options
from perception_judge.core.schema import Sampling
from perception_judge.evaluation.backends.common import LocalBackend
from perception_judge.evaluation.backends.hf import HFBackend
from perception_judge.evaluation.backends.openai import OpenAIBackend
from perception_judge.evaluation.backends.scripted import ScriptedBackend
from perception_judge.evaluation.backends.vllm import VLLMBackend
from perception_judge.evaluation.base import JudgeBackend

KINDS: dict[str, type[JudgeBackend]] = {
    "hf": HFBackend,
    "vllm": VLLMBackend,
    "openai": OpenAIBackend,
    "scripted": ScriptedBackend,
}


def parse_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """Normalise a backend spec into a dict with ``kind`` (see the module docstring)."""
    if isinstance(spec, str):
        kind, sep, target = spec.partition(":")
        if not sep or kind not in KINDS or not target:
            raise ValueError(
                f"bad backend spec {spec!r}: expected KIND:TARGET with KIND one of {', '.join(KINDS)} "
                "(e.g. hf:/path/to/model, openai:gpt-4o, scripted:constant)"
            )
        return {"kind": kind, KINDS[kind].target: target}
    d = dict(spec)
    kind = d.pop("kind", None) or d.pop("backend", None)
    if kind not in KINDS:
        raise ValueError(f"backend spec needs kind one of {', '.join(KINDS)}, got {kind!r}")
    return {"kind": kind, **d}


def takes(kind: str) -> set[str]:
    """The option keys of a backend kind (besides ``kind``, ``pixel_policy`` and ``think_prefix``)."""
    return set(KINDS[kind].Options.model_fields)


@dataclass(frozen=True)
class BackendSpec:
    """The backend of a plan: ``kind``, its typed ``options`` (defaults filled), and what every judge of the plan
    shares: the ``pixel_policy``, the ``think_prefix`` (hf and vllm prefill; servers use their template) and the
    ``sampling``. Built by :meth:`parse`; the sweep and the backends only read it."""

    kind: str
    options: Options
    pixel_policy: PixelPolicy = field(default_factory=PixelPolicy)
    think_prefix: str = "auto"
    sampling: Sampling = field(default_factory=Sampling)

    @classmethod
    def parse(cls, block: Mapping[str, Any], sampling: Sampling | None = None) -> BackendSpec:
        """A spec from a mapping ``{kind, pixel_policy, think_prefix, **options}``: a key the kind does not take
        is an error naming it (``scripted`` ignores other kinds' keys: it stands in for any judge)."""
        d = parse_spec(block)
        kind, policy, think = d.pop("kind"), d.pop("pixel_policy", None), d.pop("think_prefix", None)
        if not isinstance(policy, PixelPolicy):
            policy = PixelPolicy.parse(policy, "backend.pixel_policy")
        if kind == "scripted":
            d = {k: v for k, v in d.items() if k in takes(kind)}
        options = KINDS[kind].Options.parse(d, "backend", f"option of the {kind} backend")
        return cls(kind, options, policy, think or "auto", sampling or Sampling())

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **self.options.model_dump(
                mode="json", exclude_none=True, fallback=lambda o: f"<{type(o).__name__}>"
            ),
            "pixel_policy": self.pixel_policy.to_dict(),
            "think_prefix": self.think_prefix,
            "sampling": self.sampling.model_dump(),
        }

    def build(self, **judge: Any) -> JudgeBackend:
        """The backend of one judge: ``judge`` holds its own keys (``model``, ``adapter``, ``processor``, ``fn``,
        ``label``, ...; None values are ignored) on top of the spec's options."""
        cls = KINDS[self.kind]
        kw = self.options.model_dump(exclude_none=True) | {k: v for k, v in judge.items() if v is not None}
        if issubclass(cls, LocalBackend):
            kw["think_prefix"] = self.think_prefix
        return cls(pixel_policy=self.pixel_policy, **kw)


def load_backend(spec: str | Mapping[str, Any], **overrides: Any) -> JudgeBackend:
    """Build a backend from a spec (the module docstring); ``overrides`` win over its keys (None is ignored)."""
    d = parse_spec(spec)
    d.update({k: v for k, v in overrides.items() if v is not None})
    return BackendSpec.parse(d).build()
