"""The real Qwen-VL chat templates (package data, written to render what the published Qwen2.5-VL-Instruct and
Qwen3-VL-Thinking templates render): exact renderings, and how the protocol's think prefill treats each."""

from __future__ import annotations

import copy
import hashlib

import pytest

from perception_judge.core import protocol
from perception_judge.tiny import TEMPLATE_FILES, chat_template, qwen_vl_processor

IMG = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def proc25():
    return qwen_vl_processor("qwen2_5_vl")


@pytest.fixture(scope="module")
def proc3():
    return qwen_vl_processor("qwen3_vl")


def _render(processor, messages, generation=True, **kwargs):
    return processor.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False, **kwargs)


def _user(*parts):
    return {
        "role": "user",
        "content": [{"type": "image"} if p is None else {"type": "text", "text": p} for p in parts],
    }


SYSTEM = {"role": "system", "content": [{"type": "text", "text": "Judge."}]}


def test_qwen2_5_vl_instruct_renderings(proc25):
    assert _render(proc25, [SYSTEM, _user(None, "How many?")]) == (
        "<|im_start|>system\nJudge.<|im_end|>\n"
        f"<|im_start|>user\n{IMG}How many?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # text only, no system turn: the default one; plain string content renders alike
    text_only = _render(proc25, [{"role": "user", "content": "Hi"}])
    assert text_only == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert _render(proc25, [_user("Hi")]) == text_only
    # several images, interleaved, in order; "Picture N: " with add_vision_id
    multi = [SYSTEM, _user(None, "left", None, "right")]
    assert _render(proc25, multi, generation=False) == (
        f"<|im_start|>system\nJudge.<|im_end|>\n<|im_start|>user\n{IMG}left{IMG}right<|im_end|>\n"
    )
    assert f"Picture 1: {IMG}leftPicture 2: {IMG}right" in _render(proc25, multi, add_vision_id=True)
    # an assistant turn keeps its text as it is (the Instruct format has no reasoning handling)
    turns = [_user("Q"), {"role": "assistant", "content": "<think>\nr\n</think>\n\nA"}, _user("Q2")]
    assert "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n" in _render(proc25, turns)


def test_qwen3_vl_thinking_renderings(proc3):
    assert _render(proc3, [SYSTEM, _user(None, "How many?")]) == (
        "<|im_start|>system\nJudge.<|im_end|>\n"
        f"<|im_start|>user\n{IMG}How many?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    # no default system turn
    assert _render(proc3, [_user("Hi")]) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert (
        _render(proc3, [_user(None, "a", None)], generation=False)
        == f"<|im_start|>user\n{IMG}a{IMG}<|im_end|>\n"
    )
    assert f"Picture 1: {IMG}aPicture 2: {IMG}" in _render(
        proc3, [_user(None, "a", None)], add_vision_id=True
    )


def test_qwen3_vl_thinking_reasoning_of_earlier_turns(proc3):
    """Reasoning (inline before </think>, or reasoning_content) shows only after the last user query."""
    conversation = [
        _user("Q1"),
        {"role": "assistant", "content": "<think>\nfirst thoughts\n</think>\n\nA1"},
        _user(None, "Q2"),
        {"role": "assistant", "content": "A2", "reasoning_content": "second thoughts"},
    ]
    assert _render(proc3, conversation, generation=False) == (
        "<|im_start|>user\nQ1<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n"
        f"<|im_start|>user\n{IMG}Q2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nsecond thoughts\n</think>\n\nA2<|im_end|>\n"
    )
    # after the last query: the last turn always gets a think block, an earlier one only with reasoning
    follow = [_user("Q"), {"role": "assistant", "content": "plain"}, {"role": "assistant", "content": "last"}]
    assert _render(proc3, follow, generation=False) == (
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nplain<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nlast<|im_end|>\n"
    )


def test_qwen3_vl_thinking_refuses_tools(proc3):
    with pytest.raises(Exception, match="system, user and assistant turns only"):
        _render(proc3, [_user("Q"), {"role": "tool", "content": "42"}])


# sha256 of each template file as reviewed against the published renderings: changing a template changes this too
TEMPLATE_SHA256 = {
    "qwen2_5_vl": "98ecbac1787ac08e453982904aef7bd256b4b702afed7a3d751604233874e0d3",
    "qwen3_vl": "15811c97b0be0de23e621beff11b33fb818812cc52411ede07a23a237ac35020",
}


def test_the_templates_are_package_data():
    from importlib import resources

    assert set(TEMPLATE_FILES) == set(TEMPLATE_SHA256)
    for arch, name in TEMPLATE_FILES.items():
        data = (resources.files("perception_judge.tiny") / "templates" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == TEMPLATE_SHA256[arch], name
        text = data.decode("utf-8")
        assert text == chat_template(arch) and "<|im_start|>" in text
    with pytest.raises(ValueError, match="unknown Qwen-VL arch 'llava'"):
        chat_template("llava")


def test_the_think_prefill_with_the_real_templates(proc25, proc3):
    """Qwen2.5-VL-Instruct opens no think block: the project appends one ``<think>\\n``; Qwen3-VL-Thinking opens it
    itself: nothing is added. Both end the judge prompt inside an open think block, exactly once."""
    messages = protocol.build_messages("pair", "How many?", ["Three.", "Four."])
    p25, p3 = copy.deepcopy(proc25), copy.deepcopy(proc3)  # the prefill is installed in place
    assert not protocol.template_opens_think(p25) and protocol.template_opens_think(p3)
    plain25 = _render(p25, messages)
    r25, r3 = (
        protocol.render_generation_prompt(p25, messages),
        protocol.render_generation_prompt(p3, messages),
    )
    assert r25 == plain25 + "<think>\n"
    assert r3 == _render(p3, messages) and r3.endswith("<|im_start|>assistant\n<think>\n")
    for rendered, processor in ((r25, p25), (r3, p3)):
        assert protocol.opens_think_block(rendered)
        assert rendered.endswith("assistant\n<think>\n") and not rendered.endswith("<think>\n<think>\n")
        assert protocol.render_generation_prompt(processor, messages) == rendered, "idempotent"
    # the prefilled Qwen2.5 template still renders as before where no generation prompt is asked for
    assert _render(p25, messages, generation=False) == plain25.removesuffix("<|im_start|>assistant\n")
    fresh = copy.deepcopy(proc25)
    assert protocol.render_generation_prompt(fresh, messages, think_prefix="off") == plain25


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_the_demo_templates_render_judge_prompts_like_the_real_ones(
    arch, proc25, proc3, tiny_qwen25, tiny_qwen3
):
    """The byte-tokenizer tiny models' own templates give the judge prompts exactly the published format."""
    from transformers import AutoProcessor

    real = proc25 if arch == "qwen2_5_vl" else proc3
    demo = AutoProcessor.from_pretrained(tiny_qwen25 if arch == "qwen2_5_vl" else tiny_qwen3)
    for proto, responses, n_images in (
        ("pair", ["a", "b"], 1),
        ("batch", ["a", "b", "c"], 2),
        ("single", ["a"], 0),
    ):
        for style in protocol.PROMPT_STYLES:
            messages = protocol.build_messages(proto, "Q?", responses, n_images=n_images, style=style)
            assert _render(demo, messages) == _render(real, messages)
