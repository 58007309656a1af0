"""prompt_source: the published judge prompts read from a copy of the published repository without running it.

The files are stand-ins of our own wording in the published layouts (``support.published_layouts``), laid out at the
repositories' paths. The reference for each is what the stand-in's own code sends when it runs (a fake processor
captures its messages); the reader must return the same text in the same structure."""

from __future__ import annotations

import hashlib

import pytest
from support.published_layouts import EACH, EXAMPLE, FLEX, MJ, MMJB, MMRB2, MRB, VALUES, VLRB
from support.published_layouts import checkout as _repo
from support.published_layouts import render as _render
from support.published_layouts import sent as _sent

from perception_judge.evaluation import base
from perception_judge.evaluation.prompt_source import SOURCES, PromptSourceError, read_prompts
from perception_judge.evaluation.suites import SUITES


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
