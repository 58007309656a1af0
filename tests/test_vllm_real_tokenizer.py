"""The ``vllm`` backend on real-shape tiny judges (Qwen's tokenizer, chat templates, ids and processor settings) of
both archs (`make test-vllm`, in the .venv-vllm environment): vLLM expands the images, renders the prompt with the
think prefill and decodes the completion exactly as the ``hf`` backend does.

Each judge is first taught one verdict (a random-weight judge writes no parseable scores), so the comparison
covers the parser too: both backends must read the scores back."""

from __future__ import annotations

import importlib.util

import pytest

from perception_judge.core import protocol

pytestmark = pytest.mark.vllm

VERDICT = "The first answer matches the image.</think><answer>8</answer><answer>3</answer>"
POLICY = {"qwen2_5_vl": (56, 28), "qwen3_vl": (64, 32)}  # (image size, patch factor)


@pytest.fixture(scope="module")
def vllm_installed():
    from conftest import skip_or_fail

    if importlib.util.find_spec("vllm") is None:
        skip_or_fail(
            "vllm",
            "vLLM is not installed in this environment (make test-vllm installs .venv-vllm/ and runs here)",
        )


def _requests(tmp_path):
    from PIL import Image

    from perception_judge.core.schema import JudgeRequest

    cases = [
        ("What colour is the square?", ["Red.", "Blue."], (200, 30, 30)),
        ("How many discs are there?", ["Two.", "Three."], (30, 30, 200)),
        ("Which shape is shown?", ["A circle.", "A square."], (30, 200, 30)),
    ]
    out = []
    for i, (question, answers, colour) in enumerate(cases):
        path = tmp_path / f"image-{i}.png"
        Image.new("RGB", (64, 48), colour).save(path)
        out.append(
            JudgeRequest(f"r{i}", protocol.build_messages("pair", question, answers), [str(path)], n_scores=2)
        )
    return out


@pytest.fixture(scope="module", params=sorted(POLICY))
def judge(request, vllm_installed, tmp_path_factory):
    """(arch, folder, requests, pixel policy) of a real-shape judge taught :data:`VERDICT` for its requests."""
    from conftest import memorize_completion
    from PIL import Image
    from transformers import AutoProcessor

    from perception_judge.core.images import PixelPolicy
    from perception_judge.tiny.models import make_tiny_model

    arch = request.param
    folder = make_tiny_model(arch, tmp_path_factory.mktemp(f"real-{arch}"), seed=0, tokenizer="qwen")
    requests = _requests(tmp_path_factory.mktemp(f"images-{arch}"))
    policy = PixelPolicy(size=POLICY[arch][0], factor=POLICY[arch][1])
    processor = AutoProcessor.from_pretrained(folder)
    prompts = [protocol.render_generation_prompt(processor, r.messages) for r in requests]
    images = [policy.apply(Image.open(r.images[0])) for r in requests]
    memorize_completion(folder, prompts, images, VERDICT)
    return arch, folder, requests, policy


def _greedy():
    from perception_judge.core.schema import Sampling

    return Sampling(temperature=0.0, max_new_tokens=40, seed=0)


def test_vllm_backend_reads_the_verdict_like_hf(judge):
    from perception_judge.evaluation.backends.hf import HFBackend
    from perception_judge.evaluation.backends.vllm import VLLMBackend
    from perception_judge.evaluation.base import is_backend_error

    _, folder, requests, policy = judge
    hf = HFBackend(folder, batch_size=4, dtype="float32", device="cpu", pixel_policy=policy, progress=False)
    expected = hf.judge(requests, _greedy())
    hf.close()
    assert all(r.text == protocol.THINK_PREFIX + VERDICT and r.scores == [8, 3] for r in expected), expected
    engine = VLLMBackend(
        folder,
        dtype="float32",
        max_model_len=2048,
        pixel_policy=policy,
        engine_extra={"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
    )
    try:
        out = engine.judge(requests, _greedy())
    finally:
        engine.close()
    assert not any(is_backend_error(r) for r in out), [r.error for r in out]
    assert [r.text for r in out] == [r.text for r in expected]
    assert [r.scores for r in out] == [[8, 3]] * len(requests)
    # vLLM expanded each image into the processor's count of image tokens (Qwen3-VL: 70, Qwen2.5-VL: 4)
    assert [r.prompt_tokens for r in out] == [r.prompt_tokens for r in expected]
    assert [r.completion_tokens for r in out] == [r.completion_tokens for r in expected]
