"""Test helpers that ship with the package (importable by tests and benchmarks): the fake OpenAI server.

Imported lazily, so ``python -m perception_judge.testing.fake_openai`` runs without a runpy warning.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FakeOpenAIServer", "Faults"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from perception_judge.testing import fake_openai

        return getattr(fake_openai, name)
    raise AttributeError(f"module 'perception_judge.testing' has no attribute {name!r}")
