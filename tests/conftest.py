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

REQUIRED = {p.strip() for p in os.environ.get("PERCEPTION_JUDGE_REQUIRE", "").split(",") if p.strip()}
"""Optional packages this run must have: `make test-deepspeed` sets `deepspeed`, `make test-ray` `ray`,
`make test-track` `tensorboard`, `make test-vllm` `vllm` (and so CI). Each target collects the whole tree, so the requirement names the package: the vLLM environment
has no DeepSpeed, and its run must skip the DeepSpeed tests, not fail on them."""


def skip_or_fail(package: str, reason: str) -> None:
    """Skip (a developer's machine without `package`) or fail (the target that installs it, and CI)."""
    if package in REQUIRED:
        pytest.fail(f"{reason} (PERCEPTION_JUDGE_REQUIRE={package}: this run needs it)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def random_lora_adapter(model_dir, out, *, r: int, alpha: int, targets: list[str]):
    """Save a LoRA adapter with random, non-zero weights (``init_lora_weights=False``) on the language model of
    ``model_dir`` to ``out``: unlike a fresh adapter it changes the verdicts. Returns ``out``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    cfg = LoraConfig(
        r=r, lora_alpha=alpha, target_modules=targets, exclude_modules=r".*visual.*", init_lora_weights=False
    )
    get_peft_model(model, cfg).save_pretrained(out)
    return out


def memorize_completion(model_dir, prompts, images, completion, lr=5e-3, max_steps=300, tolerance=0.02):
    """Train the model in ``model_dir`` (in place) until greedy decoding writes ``completion`` and then its EOS after
    each rendered prompt (with its images): a random-weight judge that gives a known, parseable verdict. Only the
    completion is scored (its last positions' logits). Returns the steps taken; fails when it does not converge."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(model_dir)
    target = completion + processor.tokenizer.eos_token
    n = len(processor.tokenizer(target, add_special_tokens=False)["input_ids"])
    batch = processor(text=[p + target for p in prompts], images=images, return_tensors="pt", padding=True)
    labels = batch["input_ids"][:, -n:]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(1, max_steps + 1):
        logits = model(**batch, logits_to_keep=n + 1).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if loss.item() < tolerance:
            model.save_pretrained(model_dir)
            return step
    raise AssertionError(
        f"memorizing {completion!r} did not converge in {max_steps} steps (loss {loss.item():.3f})"
    )


@pytest.fixture(autouse=True)
def _progress_default():
    """``eval -q`` switches progress off for its process (``core.io.PROGRESS``); tests run the CLI in-process, so each
    test starts from the default again."""
    from perception_judge.core import io

    yield
    io.PROGRESS["enabled"] = None


@pytest.fixture(scope="session")
def tiny_qwen25(tmp_path_factory):
    """Folder of a tiny Qwen2.5-VL judge (template opens no think block)."""
    from perception_judge.tiny.models import make_tiny_model

    return make_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("tiny_qwen25"), seed=0)


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    """Folder of a tiny Qwen3-VL judge (template behaves like the -Thinking models)."""
    from perception_judge.tiny.models import make_tiny_model

    return make_tiny_model("qwen3_vl", tmp_path_factory.mktemp("tiny_qwen3"), seed=0)


@pytest.fixture(scope="session")
def real_qwen25(tmp_path_factory):
    """Folder of a tiny Qwen2.5-VL judge with Qwen's real tokenizer, Qwen2.5-VL-Instruct template, ids and processor
    settings (``make_tiny_model(..., tokenizer="qwen")``)."""
    from perception_judge.tiny.models import make_tiny_model

    return make_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("real_qwen25"), seed=0, tokenizer="qwen")


@pytest.fixture(scope="session")
def real_qwen3(tmp_path_factory):
    """Folder of a tiny Qwen3-VL judge with Qwen3's real tokenizer and the Qwen3-VL-Thinking template."""
    from perception_judge.tiny.models import make_tiny_model

    return make_tiny_model("qwen3_vl", tmp_path_factory.mktemp("real_qwen3"), seed=0, tokenizer="qwen")


@pytest.fixture(params=["qwen2_5_vl", "qwen3_vl"])
def tiny_model_dir(request, tiny_qwen25, tiny_qwen3):
    return tiny_qwen25 if request.param == "qwen2_5_vl" else tiny_qwen3


def solid_image(color=(255, 0, 0), size=(64, 48)) -> Image.Image:
    return Image.new("RGB", size, color)


@pytest.fixture
def red_image():
    return solid_image()
