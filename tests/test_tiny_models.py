"""Tiny Qwen-VL judges: build, reload offline, generate from image + text; deterministic; think-prefix rule."""

from __future__ import annotations

import hashlib

import pytest
import torch
from PIL import Image

from perception_judge.cli import main as cli_main
from perception_judge.core import protocol
from perception_judge.tiny.models import make_tiny_model


def _load(folder):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoModelForImageTextToText.from_pretrained(folder), AutoProcessor.from_pretrained(folder)


def test_reload_and_generate_from_image_and_text(tiny_model_dir):
    model, processor = _load(tiny_model_dir)
    assert model.config.model_type in ("qwen2_5_vl", "qwen3_vl")
    messages = protocol.build_messages("pair", "Which colour is the square?", ["Red.", "Blue."])
    text = protocol.render_generation_prompt(processor, messages)
    images = [Image.new("RGB", (64, 48), (255, 0, 0)), Image.new("RGB", (64, 48), (0, 0, 255))]
    batch = processor(text=[text, text], images=images, return_tensors="pt", padding=True)
    image_token = model.config.image_token_id
    assert (batch["input_ids"] == image_token).sum() > 0, "image placeholder was not expanded to image tokens"
    assert batch["pixel_values"].shape[0] > 0
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=6, do_sample=True)
    assert out.shape[0] == 2 and out.shape[1] > batch["input_ids"].shape[1]
    greedy = model.generate(**batch, max_new_tokens=6, do_sample=False)
    assert batch["input_ids"].shape[1] < greedy.shape[1] <= batch["input_ids"].shape[1] + 6
    assert torch.equal(greedy, model.generate(**batch, max_new_tokens=6, do_sample=False)), (
        "greedy is deterministic"
    )


def _weights_digest(folder) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_deterministic_per_seed(tmp_path):
    a = make_tiny_model("qwen2_5_vl", tmp_path / "a", seed=3)
    b = make_tiny_model("qwen2_5_vl", tmp_path / "b", seed=3)
    c = make_tiny_model("qwen2_5_vl", tmp_path / "c", seed=4)
    assert _weights_digest(a) == _weights_digest(b)
    assert _weights_digest(a) != _weights_digest(c)


def test_folder_is_a_standard_hf_folder(tiny_qwen3):
    names = {p.name for p in tiny_qwen3.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= names
    assert "chat_template.jinja" in names or "chat_template.json" in names


def test_think_prefix_rule_for_both_templates(tiny_qwen25, tiny_qwen3):
    from transformers import AutoProcessor

    msgs = protocol.build_messages("single", "Q?", ["R."])
    p25 = AutoProcessor.from_pretrained(tiny_qwen25)
    assert not protocol.template_opens_think(p25), "Qwen2.5-VL template must not open a think block"
    r25 = protocol.render_generation_prompt(p25, msgs)
    assert r25.endswith("<|im_start|>assistant\n<think>\n")
    # idempotent: rendering again does not add a second prefix
    assert protocol.render_generation_prompt(p25, msgs) == r25
    assert r25.count("<think>\n") == 1

    p3 = AutoProcessor.from_pretrained(tiny_qwen3)
    assert protocol.template_opens_think(p3), "Qwen3-VL (Thinking) template opens the think block itself"
    r3 = protocol.render_generation_prompt(p3, msgs)
    assert r3.endswith("<|im_start|>assistant\n<think>\n") and not r3.endswith("<think>\n<think>\n")

    # think_prefix="off" leaves a fresh Qwen2.5 template alone
    fresh = AutoProcessor.from_pretrained(tiny_qwen25)
    assert protocol.render_generation_prompt(fresh, msgs, think_prefix="off").endswith("assistant\n")


def test_prefixed_template_survives_save_and_reload(tiny_qwen25, tmp_path):
    from transformers import AutoProcessor

    p = protocol.prepare_processor(AutoProcessor.from_pretrained(tiny_qwen25))
    p.save_pretrained(tmp_path)
    assert protocol.template_opens_think(AutoProcessor.from_pretrained(tmp_path))


def test_cli_make_tiny_model(tmp_path, capsys):
    assert (
        cli_main(["make-tiny-model", "--arch", "qwen3_vl", "--out", str(tmp_path / "m"), "--seed", "1"]) == 0
    )
    assert (tmp_path / "m" / "model.safetensors").is_file()
    assert "qwen3_vl" in capsys.readouterr().out


def test_cli_rejects_unknown_arch(tmp_path, capsys):
    assert cli_main(["make-tiny-model", "--arch", "llama", "--out", str(tmp_path)]) == 2
    assert (
        "make-tiny-model.arch: Input should be 'qwen2_5_vl' or 'qwen3_vl' (got 'llama')"
        in capsys.readouterr().err
    )
    assert not any(tmp_path.iterdir()), "nothing is built"


def test_format_warm_start_learns_the_format_and_is_built_atomically(tmp_path):
    """ensure_tiny_model (what the tiny recipe calls) builds, warm-starts and renames into place."""
    import json

    from perception_judge.tiny.models import ensure_tiny_model

    target = tmp_path / "judge"
    assert ensure_tiny_model(str(target), "qwen2_5_vl", seed=0, warm_start_steps=40)
    assert not ensure_tiny_model(str(target), "qwen2_5_vl", seed=0, warm_start_steps=40), (
        "second call is a no-op"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["judge"], "no staging folder left behind"
    stats = json.loads((target / "tiny_model.json").read_text())["warm_start"]
    assert stats["warm_start_steps"] == 40
    # the supervised loss on the format tokens falls by well over half within 40 steps
    assert stats["loss_last"] < 0.5 * stats["loss_first"], stats
    assert 0.0 <= stats["greedy_format_rate"] <= 1.0
    # and the weights differ from the random-weight build of the same seed
    plain = make_tiny_model("qwen2_5_vl", tmp_path / "plain", seed=0)
    assert _weights_digest(plain) != _weights_digest(target)


def test_think_sources_draw_their_values_where_they_say():
    """truth: the value shown; prior: any value of the family; position: a value the answers state, the first
    answer's 2 times in 3 (so sampling explores the other answer's while greedy decoding follows the first slot)."""
    import random
    from collections import Counter

    from perception_judge.tiny import world as toy
    from perception_judge.tiny.supervised import FIRST_SLOT_BIAS, _tiny_example, tiny_records

    records = tiny_records(60, seed=3)
    rng = random.Random(0)
    first, stated, n = 0, 0, 0
    prior_values: Counter = Counter()
    for _ in range(40):
        for rec in records:
            messages, _, target = _tiny_example(rng, rec, "position")
            text = messages[-1]["content"][-1]["text"]
            if " C " in text or " B " not in text:  # pair rows only: "A <answer> B <answer>"
                continue
            answers = text.split(" A ", 1)[1].split(" B ")
            values = [toy.response_value(a.strip()) for a in answers]
            think = target.split()[0]
            n += 1
            stated += think in values
            first += think == values[0]
            _, _, prior_target = _tiny_example(rng, rec, "prior")
            prior_values[prior_target.split()[0]] += 1
            _, _, truth_target = _tiny_example(rng, rec, "truth")
            assert truth_target.split()[0] == rec["value"]
    assert n > 500 and stated == n, "the exploring think always names a value an answer states"
    assert abs(first / n - FIRST_SLOT_BIAS) < 0.05, first / n
    assert len(prior_values) == len(toy.tiny_values("colour")) + len(toy.tiny_values("count"))


def test_tiny_families_choose_the_world_the_supervised_stages_draw_from():
    """--families of the learnability check, make-tiny-model and the demo: only the named families are drawn; an
    unknown name is refused with the known ones (an option error naming the key, before any training)."""
    from perception_judge.core.options import OptionError
    from perception_judge.tiny.supervised import tiny_records
    from perception_judge.tiny.world import tiny_families

    assert tiny_families("colour") == ("colour",)
    assert tiny_families("count, colour,count") == ("count", "colour")
    with pytest.raises(OptionError, match=r"\['size'\].*colour, count"):
        tiny_families("colour,size")
    assert cli_main(["learnability", "--families", "colour,size", "--steps", "1"]) == 2
    records = tiny_records(12, seed=5, families=tiny_families("colour"))
    assert {r["family"] for r in records} == {"colour"}
    assert {r["family"] for r in tiny_records(12, seed=5)} == {"colour", "count"}, "the default keeps both"


def test_make_blind_records_both_phases_and_keeps_the_vision_tower(tmp_path):
    """make-tiny-model --from-supervised: the prior phase, then the exploring phase, vision frozen in both."""
    import json

    from safetensors.torch import load_file

    src = make_tiny_model("qwen2_5_vl", tmp_path / "sup", seed=0)
    out = tmp_path / "blind"
    assert cli_main(["make-tiny-model", "--from-supervised", str(src), "--out", str(out), "--blind-steps", "6",
                     "--explore-steps", "4", "--families", "colour"]) == 0  # fmt: skip
    blind = json.loads((out / "tiny_model.json").read_text())["blind"]
    assert blind["think_source"] == "prior" and blind["steps"] == 6 and blind["freeze_vision"]
    assert blind["explore"]["think_source"] == "position" and blind["explore"]["steps"] == 4
    assert blind["families"] == blind["explore"]["families"] == ["colour"], "the demo's one-family world"
    before, after = load_file(src / "model.safetensors"), load_file(out / "model.safetensors")
    vision = [k for k in before if ".visual." in k or k.startswith("visual.")]
    assert vision and all(before[k].equal(after[k]) for k in vision), "the vision tower is frozen"
    assert any(not before[k].equal(after[k]) for k in before if k not in vision), "the language model trained"


def test_supervised_batches_made_ahead_in_a_worker_train_the_same_weights(tmp_path, monkeypatch):
    """The data worker (the demo's supervised stages use it) only moves where the batches are made: with and
    without it the run trains bit-identical weights, and it did train; with it the batches were made in another
    process (each stream writes the pid that drew it), without it in this one."""
    import os

    from safetensors.torch import load_file

    from perception_judge.tiny import supervised
    from perception_judge.tiny.supervised import supervised_tiny_judge

    drawn_by = tmp_path / "drawn_by"
    stream = supervised._SupervisedStream.__iter__

    def recorded(self):
        with open(drawn_by, "a") as f:
            f.write(f"{os.getpid()}\n")
        yield from stream(self)

    monkeypatch.setattr(supervised._SupervisedStream, "__iter__", recorded)
    src = make_tiny_model("qwen2_5_vl", tmp_path / "src", seed=0)
    stats = {}
    for worker in (False, True):
        stats[worker] = supervised_tiny_judge(
            src,
            5,
            think_source="truth",
            seed=1,
            batch_size=8,
            data_worker=worker,
            save_to=tmp_path / f"w{worker:d}",
        )
    assert stats[False]["loss_first"] == stats[True]["loss_first"]
    assert stats[False]["loss_last"] == stats[True]["loss_last"]
    start, w0, w1 = (load_file(d / "model.safetensors") for d in (src, tmp_path / "w0", tmp_path / "w1"))
    assert all(w0[k].equal(w1[k]) for k in w0)
    assert any(not w0[k].equal(start[k]) for k in w0), "the weights moved"
    pids = [int(line) for line in drawn_by.read_text().split()]
    assert len(pids) == 2 and pids[0] == os.getpid() != pids[1], pids
