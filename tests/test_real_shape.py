"""Real-shape tiny judges (``make_tiny_model(..., tokenizer="qwen")``) on both archs: Qwen's tokenizer, chat
templates, special-token ids, vocabulary size and processor settings, through prompt rendering, the think prefill,
parsing, the ``hf`` backend and one GRPO step with LoRA on every linear layer but the vision tower's.

The models are tiny (hidden 64, 2 layers) but have Qwen's 151,936-row embedding, so they are built once per
session (``real_qwen25`` / ``real_qwen3`` in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from perception_judge.core import protocol

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("qwen2_5_vl", "qwen3_vl")
IMAGE_PAD, VISION_START, VISION_END, IM_START, IM_END = 151655, 151652, 151653, 151644, 151645
# the end of a rendered judge prompt: "<|im_start|>assistant\n<think>\n"
PROMPT_TAIL = {
    "qwen2_5_vl": [IM_START, 77091, 198, 13708, 766, 397],  # "<th" "ink" ">\n": ordinary text in Qwen2.5
    "qwen3_vl": [IM_START, 77091, 198, 151667, 198],  # <think> is one token in Qwen3
}
# (image size, patch factor); the real Qwen3-VL processor's least area is 65,536 pixels, so its fixed size is 256 (a
# smaller one it would resize, which the trainer refuses)
POLICY = {"qwen2_5_vl": (56, 28), "qwen3_vl": (256, 32)}


@pytest.fixture(params=ARCHS)
def real(request, real_qwen25, real_qwen3):
    """(arch, model folder, processor) of a real-shape tiny judge."""
    from transformers import AutoProcessor

    folder = real_qwen25 if request.param == "qwen2_5_vl" else real_qwen3
    return request.param, folder, AutoProcessor.from_pretrained(folder)


def _image(colour=(200, 30, 30)) -> Image.Image:
    return Image.new("RGB", (64, 48), colour)


def test_config_and_processor_carry_the_real_layout(real):
    arch, folder, processor = real
    config = json.loads((folder / "config.json").read_text())
    ids = {
        k: config[k]
        for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    }
    assert ids == {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
                   "vision_end_token_id": 151653}  # fmt: skip
    text = config["text_config"]
    assert (text["vocab_size"], text["bos_token_id"], text["eos_token_id"], text["pad_token_id"]) == (
        151936,
        151643,
        151645,
        151643,
    )
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [151645, 151643] and generation["pad_token_id"] == 151643
    info = json.loads((folder / "tiny_model.json").read_text())
    assert (info["tokenizer"], info["vocab_size"]) == ("qwen", 151936)
    image = processor.image_processor
    expected = (14, 3_136, 12_845_056) if arch == "qwen2_5_vl" else (16, 65_536, 16_777_216)
    assert (image.patch_size, image.size.shortest_edge, image.size.longest_edge) == expected
    assert (image.merge_size, image.temporal_patch_size) == (2, 2)
    assert type(processor.tokenizer).__name__ == "Qwen2Tokenizer" and len(processor.tokenizer) == (
        151665 if arch == "qwen2_5_vl" else 151669
    )
    from perception_judge.tiny import chat_template

    assert (folder / "chat_template.jinja").read_text() == chat_template(arch)


def test_the_7b_vocabulary_layout_from_the_command_line(tmp_path, capsys):
    from safetensors import safe_open

    from perception_judge.cli import main

    out = tmp_path / "judge"
    argv = ["make-tiny-model", "--arch", "qwen2_5_vl", "--tokenizer", "qwen"]
    assert main([*argv, "--vocab-size", "152064", "--out", str(out)]) == 0
    assert "qwen tokenizer" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["text_config"]["vocab_size"] == 152064
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        shapes = [f.get_slice(k).get_shape() for k in f.keys() if "embed_tokens" in k]  # noqa: SIM118
    assert shapes == [[152064, 64]]
    with pytest.raises(SystemExit, match="smaller than the qwen tokenizer"):
        main([*argv, "--vocab-size", "1000", "--out", str(tmp_path / "small")])


@pytest.mark.parametrize(("protocol_name", "n_images"), [("pair", 1), ("batch", 2), ("single", 0)])
def test_rendered_prompts_tokenize_with_the_real_ids(real, protocol_name, n_images):
    arch, _, processor = real
    responses = {"pair": ["Three.", "Four."], "batch": ["A", "B", "C"], "single": ["Red."]}[protocol_name]
    messages = protocol.build_messages(protocol_name, "How many?", responses, n_images=n_images)
    text = protocol.render_generation_prompt(processor, messages)
    images = [_image((40 * i, 90, 200)) for i in range(n_images)]
    batch = processor(text=[text], images=images or None, return_tensors="pt")
    ids = batch["input_ids"][0].tolist()
    assert ids[:3] == [IM_START, 8948, 198], "<|im_start|>system\\n"
    assert ids[-len(PROMPT_TAIL[arch]) :] == PROMPT_TAIL[arch]
    assert ids.count(VISION_START) == ids.count(VISION_END) == n_images
    merge = processor.image_processor.merge_size
    expected_pads = int(batch["image_grid_thw"].prod(dim=1).sum()) // merge**2 if n_images else 0
    assert ids.count(IMAGE_PAD) == expected_pads
    # Qwen2.5-VL: 64x48 -> 56x56 = 4 tokens; Qwen3-VL: at least 65,536 pixels -> 224x320 = 70 tokens
    if n_images:
        assert expected_pads == n_images * (4 if arch == "qwen2_5_vl" else 70)
    assert ids.count(IM_START) == 3 and ids.count(IM_END) == 2
    # the judge prompt's own <think> mentions: two real think tokens each in Qwen3, never in Qwen2.5
    assert ids.count(151667) == (3 if arch == "qwen3_vl" else 0)


def test_a_completion_decodes_and_parses(real):
    arch, _, processor = real
    tok = processor.tokenizer
    completion = "The first answer counts right.</think><answer>8</answer><answer>3</answer>"
    ids = tok(completion, add_special_tokens=False)["input_ids"] + [IM_END]
    assert (151668 in ids) == (arch == "qwen3_vl"), "</think> is one token in Qwen3 only"
    text = tok.decode(ids, skip_special_tokens=True)
    assert text == completion, "the special end token goes, </think> stays"
    parsed = protocol.parse_scores(text, 2, think_open=True)
    assert parsed.scores == [8, 3] and protocol.format_ok(text, 2, think_open=True)
    assert (
        protocol.parse_scores(tok.decode(ids[:-6], skip_special_tokens=True), 2, think_open=True).scores
        is None
    )


def _requests():
    from perception_judge.core.schema import JudgeRequest

    cases = [
        ("What colour?", ["Red.", "Blue."], (200, 30, 30)),
        ("How many?", ["Two.", "Three."], (30, 30, 200)),
    ]
    return [
        JudgeRequest(f"r{i}", protocol.build_messages("pair", q, answers), [_image(colour)], n_scores=2)
        for i, (q, answers, colour) in enumerate(cases)
    ]


def test_the_hf_backend_judges_with_the_real_prompt(real):
    """The backend renders the real template with the think prefill, expands the image tokens, and stores the
    completion of the same greedy generation behind the prefill; its parse is the one parser's."""
    import torch

    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.schema import Sampling
    from perception_judge.evaluation.backends.hf import HFBackend

    arch, folder, processor = real
    size, factor = POLICY[arch]
    policy = PixelPolicy(size=size, factor=factor)
    sampling = Sampling(temperature=0.0, max_new_tokens=12, seed=0)
    backend = HFBackend(
        folder, batch_size=2, dtype="float32", device="cpu", pixel_policy=policy, progress=False
    )
    requests = _requests()
    results = backend.judge(requests, sampling)
    model = backend.model  # the same weights, generated from directly
    for request, result in zip(requests, results, strict=True):
        prompt = protocol.render_generation_prompt(processor, request.messages)
        inputs = processor(
            text=[prompt], images=[policy.apply(im) for im in request.images], return_tensors="pt"
        )
        assert result.prompt_tokens == inputs["input_ids"].shape[1]
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        assert result.completion_tokens == next(
            (i + 1 for i, t in enumerate(new) if t in (151645, 151643)), len(new)
        )
        assert result.text == protocol.THINK_PREFIX + processor.decode(new, skip_special_tokens=True)
        assert result.error == protocol.parse_scores(result.text, 2).error and result.scores is None


def _short_prompt_set(folder: Path, image_size: int) -> Path:
    """Four pair rows of the toy set with their prompts in the ``tiny`` style: on CPU trl scores every position
    (prompt included) over Qwen's 151,936 rows, so a short prompt keeps the GRPO step to seconds."""
    from perception_judge.core.trainset import rows_to_dataset, split_path
    from perception_judge.tiny.toyset import toy_rows

    rows = toy_rows(4, protocols=("pair",), image_size=image_size)
    for row in rows:
        row["prompt"] = protocol.build_messages("pair", row["question"], row["responses"], style="tiny")
    folder.mkdir(parents=True)
    rows_to_dataset(rows).to_parquet(str(split_path(folder, "train")))
    return folder


def _lora_run(arch, folder, tmp_path):
    from perception_judge.train.recipe import parse_recipe
    from perception_judge.train.run import build_run

    size, _ = POLICY[arch]
    data = _short_prompt_set(tmp_path / "data", size)
    recipe = parse_recipe(
        [
            str(ROOT / "recipes" / "tiny.yaml"),
            "--dataset_name", str(data),
            "--model_name_or_path", str(folder),
            "--output_dir", str(tmp_path / "out"),
            "--pixel_policy", f"size={size}",
            "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8",
            # random weights never write an <answer> tag: the length reward gives the groups an advantage
            "--reward_funcs", "judge", "format", "completion_length",
            "--reward_weights", "1.0", "0.2", "1.0",
            "--max_completion_length", "8",
            "--max_steps", "1",
            "--beta", "0",  # no reference pass (the 151,936-row head costs most of the step on CPU)
            "--learning_rate", "0.05",
            "--eval_strategy", "no",
            "--save_strategy", "no",
        ]
    )  # fmt: skip
    return build_run(recipe, write_files=False)


def test_one_grpo_step_with_lora_on_every_linear_layer_but_the_vision_tower(real, tmp_path):
    arch, folder, _ = real
    trainer = _lora_run(arch, folder, tmp_path).trainer
    params = dict(trainer.model.named_parameters())
    lora = {n: p.detach().clone() for n, p in params.items() if "lora_" in n}
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in lora}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, adapted
    assert not [n for n in lora if "visual" in n], "the vision tower is never adapted"
    assert {n for n, p in params.items() if p.requires_grad} == set(lora), "only LoRA weights train"
    frozen = {n: p.detach().clone() for n, p in params.items() if "lora_" not in n and p.dim() > 1}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    changed = [n for n in lora if "lora_B" in n and not after[n].detach().equal(lora[n])]
    assert len(changed) == len([n for n in lora if "lora_B" in n]), "every LoRA B matrix moved off zero"
    assert all(after[n].detach().equal(v) for n, v in frozen.items()), "base and vision weights untouched"
    (log,) = [h for h in trainer.state.log_history if "reward" in h]
    assert log["step"] == 1 and log["reward_std"] > 0
    assert {"rewards/judge/mean", "rewards/format/mean", "rewards/completion_length/mean"} <= set(log)
    assert log["rewards/format/mean"] == 0.0, "random weights never close a think block with answer tags"
    assert protocol.template_opens_think(trainer.processing_class)


VERDICT = "The first answer matches the image.</think><answer>8</answer><answer>3</answer>"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_a_taught_verdict_comes_back_through_the_hf_backend(arch, tmp_path):
    """A real-shape judge taught one verdict: the backend's prompt, prefill, decoding and parser give its scores."""
    from conftest import memorize_completion
    from transformers import AutoProcessor

    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.schema import Sampling
    from perception_judge.evaluation.backends.hf import HFBackend
    from perception_judge.tiny.models import make_tiny_model

    folder = make_tiny_model(arch, tmp_path / "judge", seed=0, tokenizer="qwen")
    processor = AutoProcessor.from_pretrained(folder)
    policy = PixelPolicy(size=POLICY[arch][0], factor=POLICY[arch][1])
    requests = _requests()
    prompts = [protocol.render_generation_prompt(processor, r.messages) for r in requests]
    memorize_completion(folder, prompts, [policy.apply(r.images[0]) for r in requests], VERDICT)
    backend = HFBackend(
        folder, batch_size=2, dtype="float32", device="cpu", pixel_policy=policy, progress=False
    )
    results = backend.judge(requests, Sampling(temperature=0.0, max_new_tokens=40, seed=0))
    n_verdict = len(processor.tokenizer(VERDICT, add_special_tokens=False)["input_ids"])
    for result in results:
        assert result.text == protocol.THINK_PREFIX + VERDICT
        assert result.scores == [8, 3] and result.error is None
        assert result.completion_tokens == n_verdict + 1, "the verdict, then <|im_end|>"
