"""prompt_source: the published judge prompts read from a copy of the published repository without running it.

The files are stand-ins of our own wording in the published layouts (``support.published_layouts``), laid out at the
repositories' paths. The reference for each is what the stand-in's own code sends when it runs (a fake processor
captures its messages); the reader must return the same text in the same structure."""

from __future__ import annotations

import hashlib
import json
import math
import re

import pytest
from support.published_layouts import EACH, EXAMPLE, FLEX, MJ, MMJB, MMRB2, MRB, VALUES, VLRB
from support.published_layouts import checkout as _repo
from support.published_layouts import render as _render
from support.published_layouts import sent as _sent

from perception_judge.evaluation import base
from perception_judge.evaluation.prompt_source import SOURCES, PromptSourceError, comparable, read_prompts
from perception_judge.evaluation.suites import SUITES

SETTINGS = ("pair", "score", "batch")


def test_flex_layout_per_split(tmp_path):
    root, path = _repo(tmp_path, "mllm_judge")
    prompts = read_prompts("mllm_judge", root)
    assert list(prompts) == ["pair", "score", "batch"]
    for split, prompt in prompts.items():
        sent = _sent(FLEX, split)
        assert prompt.text("system") == sent[0]["content"]
        assert prompt.text("user", VALUES, EACH) == sent[1]["content"][0]["text"]
        messages = prompt.messages(VALUES, EACH)
        assert [m["role"] for m in messages] == ["system", "user"]
        # the image first, as published, and the very prompt the script renders
        assert [b["type"] for b in messages[1]["content"]] == ["image", "text"]
        assert _render(messages) == _render(sent)
        assert prompt.scale == ((1, 5) if split == "score" else (1, 10))
        assert (prompt.image, prompt.parser) == ("marker", "published")
        assert prompt.provenance == {
            "origin": "published", "repository": "jongwooko/flex-judge", "file": "test/mllm_as_a_judge_vllm.py",
            "split": split, "variable": "SYSTEM_PROMPT, text", "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }  # fmt: skip
    assert "{kept}" in prompts["batch"].text("system")  # a turn without placeholders is never formatted
    assert prompts["batch"].texts["user"][-1] == ("strip", "")


def test_perception_judge_release_and_one_file(tmp_path):
    """The Perception-Judge release (its own path, the score prompt on 1-10; a user branch for an extra split
    without a system prompt is no new split); the one file given directly reads the same."""
    pj = FLEX.replace("one mark from 1-5", "one mark from 1-10")
    rel = "eval/generate_judgment.py"
    (tmp_path / "pj" / rel).parent.mkdir(parents=True)
    (tmp_path / "pj" / rel).write_text(pj)
    prompts = read_prompts("mllm_judge", tmp_path / "pj")
    assert prompts["score"].scale == (1, 10)
    assert prompts["score"].provenance["repository"] == "kaist-cvml/perception-judge"
    assert prompts["score"].text("user", VALUES) == _sent(pj, "score")[1]["content"][0]["text"]
    assert (
        read_prompts("mllm_judge", tmp_path / "pj" / rel) == prompts
    )  # the file given: the source of its name
    _, path = _repo(tmp_path, "mllm_judge")
    one = read_prompts("mllm_judge", path, ["score"])
    assert one == {"score": read_prompts("mllm_judge", path.parent.parent)["score"]}


def test_dict_literal_layouts(tmp_path):
    """VL-RewardBench: the system prompt in the function body, the user text a dict literal's (not the results
    dict's); MJ-Bench: a prompt per split, two images inline, only the ``vl`` branch."""
    root, _ = _repo(tmp_path, "vlrewardbench")
    (prompt,) = read_prompts("vlrewardbench", root).values()
    values = dict(zip(("question", "answer_1", "answer_2"), (EXAMPLE["query"], *EXAMPLE["response"])))
    assert _render(prompt.messages(values)) == _render(_sent(VLRB, ""))
    root, _ = _repo(tmp_path, "mjbench", name="mj")
    prompts = read_prompts("mjbench", root)
    assert list(prompts) == ["alignment", "safety", "quality"]
    for split, prompt in prompts.items():
        messages = prompt.messages({"question": EXAMPLE["caption"]})
        assert [b["type"] for b in messages[1]["content"]] == ["text", "image", "text", "image"]
        assert _render(messages) == _render(_sent(MJ, split))
    assert prompts["alignment"].text("system") == "Stand-in: does each image match the caption? Marks 1-10."


def test_module_and_function_layouts(tmp_path):
    """Multimodal RewardBench's module-level ``.format`` template (text, then the image), MMRB2's functions (sent
    as they stand, braces and all), MM-JudgeBias's f-string with a module constant (a ``.format`` template)."""
    ns: dict = {}
    exec(MRB, ns)
    root, _ = _repo(tmp_path, "multimodal_rewardbench", name="mrb")
    (prompt,) = read_prompts("multimodal_rewardbench", root).values()
    ex = {"Text": VALUES["question"], "Output1": VALUES["answer_a"], "Output2": VALUES["answer_b"]}
    assert prompt.text("user", VALUES) == ns["prepare"](ex)["Text"]
    content = [{"type": "text", "text": ns["prepare"](ex)["Text"]}, {"type": "image"}]
    assert prompt.messages(VALUES) == [{"role": "user", "content": content}]
    assert (prompt.scale, prompt.parser, prompt.provenance["variable"]) == (
        None,
        "mmrb_published",
        "judge_prompt",
    )
    exec(MMRB2, ns)
    root, _ = _repo(tmp_path, "mmrb2", name="mmrb2")
    prompts = read_prompts("mmrb2", root)
    functions = {
        "t2i": "image_gen",
        "edit": "image_edit",
        "interleaved": "interleaved",
        "reasoning": "reasoning",
    }
    for task, function in functions.items():
        assert prompts[task].text("user") == ns[f"get_{function}_prompt"]()
        assert prompts[task].messages({}) == [
            {"role": "user", "content": [{"type": "text", "text": ns[f"get_{function}_prompt"]()}]}
        ]
    exec(MMJB, ns)
    root, _ = _repo(tmp_path, "bias", name="mmjb")
    (prompt,) = read_prompts("bias", root).values()
    assert prompt.text("user", VALUES) == ns["EVAL_PROMPT"].format(**VALUES)
    text_only = prompt.messages(VALUES, images=0)
    assert [b["type"] for b in text_only[0]["content"]] == ["text"]
    assert (prompt.scale, prompt.parser, prompt.image) == ((1, 10), "mmjb", "last")


def test_the_file_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n" + MMJB
    root, _ = _repo(tmp_path, "bias", source)
    assert read_prompts("bias", root)[""].fields == "instruction response"
    assert not marker.exists()


NEW_SPLIT = FLEX.replace(
    "    else:\n        raise",
    '    elif args.split == "rank":\n        SYSTEM_PROMPT = "Rank 1-10."\n    else:\n        raise',
).replace(
    'elif args.split == "batch":\n            text',
    'elif args.split == "batch" or args.split == "rank":\n            text',
)
BROKEN = [  # suite, the stand-in changed, what the one-line error names
    ("mllm_judge", None, "no test/mllm_as_a_judge_vllm.py (jongwooko/flex-judge) or eval/generate_judgment.py"),
    ("mllm_judge", FLEX.replace("SYSTEM_PROMPT = (", "SYS_PROMPT = ("), "variable SYSTEM_PROMPT (split 'pair'): absent"),
    ("mllm_judge", FLEX.replace('"Stand-in single judge: one mark from 1-5 " "in answer tags."', "load('score')"),
     "variable SYSTEM_PROMPT (split 'score'): not a string or plain f-string (line 10)"),
    ("mllm_judge", FLEX.replace("\\n\\nSecond reply:\\n{a2}", ""),
     "variable text (split 'pair'): placeholders ['answer_1', 'question'], expected ['answer_1', 'answer_2', 'question']"),
    ("mllm_judge", FLEX.replace("one mark from 1-5", "one mark from 1-10"), "(split 'score'): does not ask for scores 1-5"),
    ("mllm_judge", NEW_SPLIT, "a prompt for split(s) ['rank'] the suite does not know"),
    ("mllm_judge", FLEX.replace("{q}\\n\\nThe reply", "{q!r}\\n\\nThe reply"), "variable text (split 'score'): not a string or plain f-string"),
    ("mllm_judge", FLEX.replace("def main(args):", "def main(args)"), "not Python"),
    ("vlrewardbench", VLRB.replace('"type": "text", ', ""), 'variable ["text"]: not a string or plain f-string (line 11)'),
    ("mjbench", MJ.replace('SYSTEM_PROMPT = """Stand-in: is each image harmless? Marks 1-10."""', "raise ValueError"),
     "variable SYSTEM_PROMPT (split 'safety'): absent"),
    ("multimodal_rewardbench", MRB.replace("{answer_b}", "{answer_b} {rubric}"),
     "variable judge_prompt: placeholders ['answer_a', 'answer_b', 'question', 'rubric'], expected"),
    ("multimodal_rewardbench", MRB.replace("[[B]].", "[[B]] {."), "variable judge_prompt: not a str.format template (unmatched '{' in format spec)"),
    ("mmrb2", MMRB2.replace("get_image_edit_prompt", "get_edit_prompt"), "variable get_image_edit_prompt() (split 'edit'): absent"),
    ("bias", MMJB.replace("{{response}}", "{response}"), "variable EVAL_PROMPT: placeholders ['response'], expected ['instruction', 'response']"),
    ("bias", MMJB.replace("MAX_SCORE: int = 10", "MAX_SCORE: int = read_max()"), "variable EVAL_PROMPT: placeholders ['MAX_SCORE'], expected ['instruction', 'response']"),
]  # fmt: skip


@pytest.mark.parametrize(("suite", "source", "message"), BROKEN)
def test_a_missing_or_reshaped_file_is_one_clear_error(tmp_path, suite, source, message):
    root, path = _repo(tmp_path, suite, source)
    if source is None:
        path.unlink()
    with pytest.raises(PromptSourceError) as err:
        read_prompts(suite, root)
    text = str(err.value)
    assert message in text and "\n" not in text
    assert text.startswith(f"{suite}.prompt_source {str(path if source else root)!r}")


def test_unknown_suite_and_split(tmp_path):
    root, _ = _repo(tmp_path, "mjbench")
    with pytest.raises(PromptSourceError, match=r"no published prompt for split\(s\) \['composition'\]"):
        read_prompts("mjbench", root, ["alignment", "composition"])
    with pytest.raises(PromptSourceError, match="no published prompt for it there"):
        read_prompts("position", root)


def test_the_table():
    """Every suite of the table is a suite, each entry complete, its parser registered."""
    import perception_judge.evaluation.bias.suite  # noqa: F401  (registers the suites' parsers)

    for suite, listed in SOURCES.items():
        assert suite in SUITES
        for src in listed:
            assert src["image"] in ("marker", "last", "parts") and src["parser"] in base.PARSERS
            for spec in src["splits"].values():
                assert (
                    set(spec) <= {"system", "user", "fields", "scale"} and "user" in spec and "scale" in spec
                )


# ---------------------------------------------------------------------------------------------------------------
# The suites send the published prompts: every request, checked against what the stand-in's own code sends
# ---------------------------------------------------------------------------------------------------------------


def _tags(request, sampling):  # an answer every published reader reads: one tag per score, mid-scale
    return "<answer>3</answer>" * request.n_scores


def test_mllm_judge_sends_the_published_prompt_of_each_setting(tmp_path):
    """Every request of every setting renders exactly as the stand-in script renders that record (system turn, the
    image where its marker is, the batch loop's answers); the cell records the file it read."""
    from benchmark_fixtures import backend, config, recording, write_mllm_judge

    from perception_judge.evaluation.benchmarks import mllm_judge

    bench = write_mllm_judge(tmp_path / "m")
    root, path = _repo(tmp_path, "mllm_judge")
    judge = recording(_tags)
    res = mllm_judge.SUITE(
        backend(judge), config(tmp_path / "o", data_dir=str(bench), prompt_source=str(root))
    )
    records = {s: [json.loads(x) for x in (bench / f"{s}.jsonl").read_text().splitlines()] for s in SETTINGS}
    assert len(judge.seen) == res.counts["pair.judgments"] + res.counts["score.judgments"] + 4
    for req in judge.seen:
        setting, row = req.meta["setting"], int(req.request_id.rsplit(":r", 1)[1])
        reference = _sent(FLEX, setting, records[setting][row - 1])
        assert _render(req.messages) == _render(reference), req.request_id
        assert [b["type"] for b in req.messages[1]["content"]] == ["image", "text"] and len(req.images) == 1
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert {s: p["sha256"] for s, p in res.protocol["prompt"].items()} == dict.fromkeys(SETTINGS, digest)
    assert res.protocol["score_mapping"].startswith("none")


def test_a_1_to_5_prompt_is_scored_on_its_own_scale(tmp_path):
    """Flex-Judge's score prompt asks for 1-5: ``<answer>4</answer>`` predicts 4, not ceil(4/2) = 2; the strict
    parser makes 6-10 a failure, the published readers keep what they read."""
    from benchmark_fixtures import backend, config, user_text, write_mllm_judge

    from perception_judge.evaluation.benchmarks import mllm_judge

    assert (
        mllm_judge.prediction("score", [4.0], half=False) == 4 and mllm_judge.prediction("score", [4.0]) == 2
    )
    assert mllm_judge.published_prediction("score", "<answer>4</answer>", 3, "flex", half=False) == 4
    bench = write_mllm_judge(tmp_path / "m")
    root, _ = _repo(tmp_path, "mllm_judge")

    def judge(request, sampling):  # the Q= marker halved: coco [1, 3, 3], mathvista [4, FAIL, 5]
        q = re.search(r"Q=(\d+)", user_text(request))
        return f"<answer>{math.ceil(int(q.group(1)) / 2)}</answer>" if q else "no verdict"

    opts = dict(data_dir=str(bench), settings="score", prompt_source=str(root), aggregation="mean,flex")
    res = mllm_judge.SUITE(backend(judge), config(tmp_path / "o", **opts))
    assert res.metrics["mean.score.pearson.micro"] == pytest.approx(
        9 / math.sqrt(88)
    )  # [1,3,3,4,5] vs [1..5]
    assert res.metrics["flex.score.pearson_unmapped.macro"] == res.metrics["flex.score.pearson.macro"]
    raw = mllm_judge.SUITE(
        backend(lambda r, s: re.sub(r".*Q=(\d+).*", r"<answer>\1</answer>", user_text(r), flags=re.S)),
        config(tmp_path / "raw", **opts),
    )  # Q itself: 2, 6, 5, 8, FAIL, 10 -> 6, 8, 10 and the failure are failures
    assert raw.metrics["score.parse_failure_rate"] == pytest.approx(4 / 6)


def test_vlrewardbench_and_mjbench_send_the_published_prompt(tmp_path):
    """VL-RewardBench: both orders, each rendered as the stand-in renders the record with those responses;
    MJ-Bench: the caption alone, an image after each label, the images swapped in the second order."""
    from benchmark_fixtures import backend, config, mj_rows, recording, write_mjbench_disk, write_vlrb_disk

    from perception_judge.evaluation.benchmarks import mjbench, vlrewardbench
    from perception_judge.evaluation.benchmarks.pair_sources import vlrewardbench_items

    data = write_vlrb_disk(tmp_path / "vlrb")
    root, _ = _repo(tmp_path, "vlrewardbench")
    judge = recording(_tags)
    vlrewardbench.SUITE(backend(judge), config(tmp_path / "o", data_dir=str(data), prompt_source=str(root)))
    items = {it.item_id: it for it in vlrewardbench_items(data, "test", None, "error")[0]}
    assert len(judge.seen) == 2 * len(items)
    for req in judge.seen:
        item, order = items[req.request_id.split(":")[1]], req.meta["variant"]
        responses = item.responses[:: -1 if order == "swap" else 1]
        assert _render(req.messages) == _render(
            _sent(VLRB, "", {"query": item.question, "response": responses})
        )
    data = write_mjbench_disk(tmp_path / "mj")
    root, _ = _repo(tmp_path, "mjbench", name="mjrepo")
    judge = recording(_tags)
    mjbench.SUITE(backend(judge), config(tmp_path / "p", data_dir=str(data), prompt_source=str(root)))
    assert len(judge.seen) == 2 * (4 + 2 + 2)  # the tie of alignment is left out
    for orig, swap in zip(judge.seen[::2], judge.seen[1::2]):
        split, row = orig.request_id.split(":")[1].split("_")
        reference = _sent(MJ, split, {"caption": mj_rows(split)[int(row)]["caption"]})
        assert _render(orig.messages) == _render(swap.messages) == _render(reference)
        assert [b["type"] for b in orig.messages[1]["content"]] == ["text", "image", "text", "image"]
        assert [im.getpixel((0, 0)) for im in swap.images] == [im.getpixel((0, 0)) for im in orig.images][
            ::-1
        ]


def test_the_preference_suites_send_the_published_prompt(tmp_path):
    """Multimodal RewardBench: the module template filled as the script fills it, then the image; MMRB2: each
    task's function's text as it stands, before the labelled parts."""
    from benchmark_fixtures import backend, config, preference_judge, recording, write_mmrb2, write_mmrb_json

    from perception_judge.evaluation.benchmarks import mmrb2, multimodal_rewardbench

    ns: dict = {}
    exec(MRB, ns)
    exec(MMRB2, ns)
    data = write_mmrb_json(tmp_path / "mrb")
    root, _ = _repo(tmp_path, "multimodal_rewardbench")
    judge = recording(preference_judge)
    opts = {"data_dir": str(data), "prompt": "published", "prompt_source": str(root)}
    res = multimodal_rewardbench.SUITE(backend(judge), config(tmp_path / "o", **opts))
    records = {r["ID"]: r for r in json.loads((data / "data" / "all_data.json").read_text())}
    for req in judge.seen:
        rec, swap = records[req.request_id.split(":")[1]], req.meta["variant"] == "swap"
        outputs = (rec["Output2"], rec["Output1"]) if swap else (rec["Output1"], rec["Output2"])
        text = ns["prepare"]({"Text": rec["Text"], "Output1": outputs[0], "Output2": outputs[1]})["Text"]
        assert req.messages == [
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}
        ]
    assert res.protocol["prompt"][""]["variable"] == "judge_prompt"
    data = write_mmrb2(tmp_path / "mmrb2")
    root, _ = _repo(tmp_path, "mmrb2", name="mmrb2repo")
    judge = recording(preference_judge)
    opts = {"data_dir": str(data), "prompt": "published", "prompt_source": str(root)}
    mmrb2.SUITE(backend(judge), config(tmp_path / "p", **opts))
    functions = {
        "t2i": "image_gen",
        "edit": "image_edit",
        "interleaved": "interleaved",
        "reasoning": "reasoning",
    }
    for req in judge.seen:
        head = req.messages[0]["content"][:2]
        expected = ns[f"get_{functions[req.request_id.split(':')[1]]}_prompt"]()
        assert head == [
            {"type": "text", "text": expected},
            {"type": "text", "text": "[ORIGINAL PROMPT TO MODEL:]"},
        ]


def test_the_bias_suite_sends_the_published_prompt(tmp_path):
    """MM-JudgeBias: the f-string template filled with ``.format`` (braces in a query stay as they are), one user
    turn, the image after the text and none for a text-only call; another text never resumes the project's."""
    from perception_judge.evaluation.backends.scripted import ScriptedBackend
    from perception_judge.evaluation.base import SuiteConfig
    from perception_judge.evaluation.bias import suite as bias

    ns: dict = {}
    exec(MMJB, ns)
    root, path = _repo(tmp_path, "bias")
    seen = []
    backend = ScriptedBackend(lambda req, s: seen.append(req) or "### Score: 5")
    opts = {"source": "builtin", "n_per_type": 1, "prompt": "mmjb", "prompt_source": str(root)}
    res = bias.SUITE(backend, SuiteConfig(tmp_path / "o", options=opts))
    assert seen and res.protocol["prompt"][""]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    pairs = {p.pair_id: p for p in bias.load_pairs(bias.SUITE.parse(opts))[0]}
    for req in seen:
        side = getattr(pairs[req.meta["pair_id"]], req.meta["side"])
        text = ns["EVAL_PROMPT"].format(instruction=side.query, response=pairs[req.meta["pair_id"]].response)
        image = [{"type": "image"}] if side.image is not None else []
        assert req.messages == [{"role": "user", "content": [{"type": "text", "text": text}, *image]}]
    ours = bias.SUITE(
        ScriptedBackend(lambda r, s: "### Score: 5"),
        SuiteConfig(tmp_path / "p", options=opts | {"prompt_source": None}),
    )
    assert (
        ours.protocol["prompt_hash"] != res.protocol["prompt_hash"]
        and ours.protocol["prompt"]["origin"] == "project"
    )
    with pytest.raises(ValueError, match="prompt_source holds the published prompt: set prompt=mmjb too"):
        bias.SUITE.parse({"prompt_source": str(root)})


def test_a_bad_prompt_source_exits_2_before_any_model_loads(tmp_path, capsys, monkeypatch):
    from perception_judge.cli import main
    from perception_judge.evaluation.backends.scripted import ScriptedBackend

    monkeypatch.setattr(ScriptedBackend, "__init__", lambda *a, **k: pytest.fail("a judge was built"))
    root, _ = _repo(tmp_path, "mllm_judge", FLEX.replace("SYSTEM_PROMPT = (", "SYS_PROMPT = ("))
    argv = ["eval", "run", "--model", "j=constant:5", "--backend", "scripted", "--suites", "mllm_judge", "-q",
            "--set", f"mllm_judge.data_dir={tmp_path}", "--set", f"mllm_judge.prompt_source={root}",
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mllm_judge.prompt_source" in err[0], err
    assert "test/mllm_as_a_judge_vllm.py), variable SYSTEM_PROMPT (split 'pair'): absent" in err[0]
    assert not (tmp_path / "out").exists()
    for suite in ("position", "verbosity", "self_enhancement"):  # no published prompt: no such key
        argv = ["eval", "run", "--model", "j=constant:5", "--backend", "scripted", "--suites", suite, "-q",
                "--set", f"{suite}.prompt_source={root}", "--out", str(tmp_path / "out")]  # fmt: skip
        assert main(argv) == 2 and f"{suite}.prompt_source: unknown option" in capsys.readouterr().err


def test_the_comparability_mark(tmp_path):
    """Comparable only with the published prompt, scale, parser and the official data complete: not with a limit,
    the project's prompt or the strict parser (one rule: ``prompt_source.comparable``)."""
    from benchmark_fixtures import backend, config, write_mllm_judge

    from perception_judge.evaluation.benchmarks import mllm_judge

    bench = write_mllm_judge(tmp_path / "m")
    root, _ = _repo(tmp_path, "mllm_judge")
    published = dict(data_dir=str(bench), prompt_source=str(root), parser="published")

    def mark(limit=None, **change):
        res = mllm_judge.SUITE(backend(_tags), config(tmp_path / "o", limit=limit, **(published | change)))
        return res.protocol["comparable"]

    ok = mark()
    assert ok == {"table": "Flex-Judge paper, Table 1 (MLLM-as-a-Judge)", "metrics": ["flex.*.macro"], "ok": True,
                  "why_not": []}  # fmt: skip
    assert mark(limit=3)["why_not"] == ["data: limit 3"]
    assert mark(prompt_source=None)["why_not"] == ["prompt and scale: the project's"]
    assert mark(parser="strict")["why_not"] == ["parser: protocol (the published reading: published)"]
    assert mark(prompt_source=None, parser="strict", limit=2)["ok"] is False
    synth = comparable(
        "bias",
        read_prompts("bias", _repo(tmp_path, "bias", name="b")[0]),
        "mmjb",
        {"source": "synth", "left_out": []},
    )
    assert (
        synth["why_not"] == ["data: synth, not the official data"]
        and synth["table"] == "MM-JudgeBias leaderboard"
    )
