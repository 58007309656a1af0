"""Shared fixtures: tiny offline Qwen-VL judges (built once per session) and small PIL images."""

from __future__ import annotations

import os

# Nothing in the test suite may touch a model hub or a tracker.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
from PIL import Image

REQUIRE_OPTIONAL = os.environ.get("PERCEPTION_JUDGE_REQUIRE_OPTIONAL") == "1"
"""Set by `make test-deepspeed` / `make test-vllm` (and so by CI): a missing optional dependency fails the run."""


def skip_or_fail(reason: str) -> None:
    """Skip (a developer's machine without the optional package) or fail (the targets that install it, and CI)."""
    if REQUIRE_OPTIONAL:
        pytest.fail(f"{reason} (PERCEPTION_JUDGE_REQUIRE_OPTIONAL=1: this run needs it)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


@pytest.fixture(scope="session")
def tiny_qwen25(tmp_path_factory):
    """Folder of a tiny Qwen2.5-VL judge (template opens no think block)."""
    from perception_judge.tiny_models import make_tiny_model

    return make_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("tiny_qwen25"), seed=0)


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    """Folder of a tiny Qwen3-VL judge (template behaves like the -Thinking models)."""
    from perception_judge.tiny_models import make_tiny_model

    return make_tiny_model("qwen3_vl", tmp_path_factory.mktemp("tiny_qwen3"), seed=0)


@pytest.fixture(params=["qwen2_5_vl", "qwen3_vl"])
def tiny_model_dir(request, tiny_qwen25, tiny_qwen3):
    return tiny_qwen25 if request.param == "qwen2_5_vl" else tiny_qwen3


def solid_image(color=(255, 0, 0), size=(64, 48)) -> Image.Image:
    return Image.new("RGB", size, color)


@pytest.fixture
def red_image():
    return solid_image()
