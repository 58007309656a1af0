"""Test helpers that ship with the package: the fake OpenAI server (imported lazily, so ``python -m
perception_judge.testing.fake_openai`` runs without a runpy warning)."""

import importlib
from typing import Any

__all__ = ["FakeOpenAIServer", "Faults"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'perception_judge.testing' has no attribute {name!r}")
    return getattr(importlib.import_module("perception_judge.testing.fake_openai"), name)
