"""Stand-ins of the published prompt files, our own wording in the published layouts (a system prompt assigned per
split inside ``if`` branches, an f-string user turn with Qwen image markers, a loop that appends one answer at a
time, a dict literal's text, a module-level ``.format`` template, functions returning a prompt, an f-string with a
module constant), laid out at the repositories' paths by :func:`checkout`; :func:`sent` runs a stand-in's own code on
one record (never the reader: the reference of what the published script sends), :func:`render` renders messages
through the Qwen2.5-VL chat template as the Flex-Judge scripts do."""

from __future__ import annotations

import types

import jinja2.sandbox

from perception_judge.evaluation.prompt_source import QWEN_IMAGE
from perception_judge.tiny import chat_template

FLEX = """import json

def main(args):
    if args.split == "pair":
        SYSTEM_PROMPT = (
            "Stand-in pair judge: reason inside think tags, "
            "then give both replies a mark from 1-10 in answer tags."
        )
    elif args.split == "score":
        SYSTEM_PROMPT = "Stand-in single judge: one mark from 1-5 " "in answer tags."
    elif args.split == "batch":
        SYSTEM_PROMPT = "Stand-in batch judge: " + "distinct marks from 1-10, braces {kept} as they are."
    else:
        raise NotImplementedError
    for example in dataset:
        q = example["instruction"]
        if args.split == "pair":
            a1, a2 = example["answer1"]["answer"], example["answer2"]["answer"]
            text = f"<IMG>\\n\\nAsked {{sic}}:\\n{q}\\n\\nFirst reply:\\n{a1}\\n\\nSecond reply:\\n{a2}"
        elif args.split == "score" or args.split == "score_new":
            a1 = example["answer"]
            text = f"<IMG>\\n\\nAsked:\\n{q}\\n\\nThe reply:\\n{a1}"
        elif args.split == "batch":
            text = f"<IMG>\\n\\nAsked:\\n{q}\\n\\n"
            a = example["answers"]
            for i in range(len(a)):
                text += f"Reply no. {i+1}:\\n{a[i]['answer']}\\n\\n"
            text = text.strip()
        msg = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": [{"type": "text", "text": text}]}]
        text = processor.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)
""".replace("<IMG>", QWEN_IMAGE)

VLRB = """def main(args):
    SYSTEM_PROMPT = "Stand-in: mark both replies from 1-10."
    for example in dataset:
        q, (a1, a2) = example["query"], example["response"]
        msg = [{"role": "system", "content": SYSTEM_PROMPT},
               {"role": "user", "content": [{"type": "text", "text": f"<IMG>\\nAsked: {q}\\n1) {a1}\\n2) {a2}"}]}]
        text = processor.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)

def save(outputs, out):
    for o in outputs:
        out.write(json.dumps({"text": o.outputs[0].text.strip(), "pred": [0, 0]}))
""".replace("<IMG>", QWEN_IMAGE)

MJ = '''def main(args):
    if args.split == "alignment":
        SYSTEM_PROMPT = """Stand-in: does each image match the caption? \\
Marks 1-10."""
    elif args.split == "safety":
        SYSTEM_PROMPT = """Stand-in: is each image harmless? Marks 1-10."""
    elif args.split == "quality":
        SYSTEM_PROMPT = """Stand-in: is each image free of artifacts? Marks 1-10."""
    elif args.split == "bias":
        raise NotImplementedError
    for example in dataset:
        q = example["caption"]
        if args.model_type == 'vl':
            msg = [{"role": "system", "content": SYSTEM_PROMPT},
                   {"role": "user", "content": [{"type": "text", "text": f"""Caption: {q}\\nLeft:\\n<IMG>\\nRight:\\n<IMG>"""}]}]
            prompt = processor.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)
        elif args.model_type == 'omni':
            text = (f"Caption: {q}\\n" "Left: <|IMAGE|>")
'''.replace("<IMG>", QWEN_IMAGE)

MRB = '''import json

judge_prompt = """Stand-in judge: pick the better reply, answer [[A]] or [[B]].

The replies follow:
[User Question]
{question}

[The Start of Assistant A's Answer]
{answer_a}
[The End of Assistant A's Answer]

[The Start of Assistant B's Answer]
{answer_b}
[The End of Assistant B's Answer]"""

def prepare(ex):
    return {"Text": judge_prompt.format(question=ex["Text"], answer_a=ex["Output1"], answer_b=ex["Output2"])}
'''

MMRB2 = "\n".join(
    f'def get_{name}_prompt():\n    """Doc."""\n    return "Stand-in {name} judge. Answer as JSON: {{\\"better_response\\": \\"A\\"}}"\n'
    for name in ("image_gen", "image_edit", "interleaved", "reasoning")
)

MMJB = '''MAX_SCORE: int = 10

EVAL_PROMPT = f"""
Stand-in task: mark the reply from 1 to {MAX_SCORE}.
Instruction: {{instruction}}
Reply: {{response}}
Mark:"""
'''

LAYOUTS = {  # suite -> (the published file's path in its repository, the stand-in)
    "mllm_judge": ("test/mllm_as_a_judge_vllm.py", FLEX),
    "vlrewardbench": ("test/vl_rewardbench_vllm.py", VLRB),
    "mjbench": ("test/mj_bench_vllm.py", MJ),
    "multimodal_rewardbench": ("scripts/1_run_model_as_judge_gpt4o.py", MRB),
    "mmrb2": ("evaluate/generate_judgements/evaluator_apis/llm_judges/evaluation_prompts.py", MMRB2),
    "bias": ("mm_judgebias/prompts.py", MMJB),
}
EXAMPLE = {"instruction": "What is {x} here?", "answer": "A cat.", "answer1": {"answer": "A cat."},
           "answer2": {"answer": "A dog {y}."}, "answers": [{"answer": "one"}, {"answer": "two"}, {"answer": "3"}],
           "query": "Which fruit?", "response": ["An apple.", "A pear."], "caption": "A red {car}."}  # fmt: skip
VALUES = {"question": "What is {x} here?", "answer_1": "A cat.", "answer_2": "A dog {y}.", "answer_a": "Yes.",
          "answer_b": "No {z}.", "instruction": "Count {the} dots.", "response": "Three."}  # fmt: skip
EACH = [{"n": i + 1, "answer": a["answer"]} for i, a in enumerate(EXAMPLE["answers"])]


def checkout(tmp_path, suite, text=None, name="repo"):
    """A checkout holding the suite's stand-in (or ``text``) at the published path."""
    rel, default = LAYOUTS[suite]
    path = tmp_path / name / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(default if text is None else text)
    return path.parents[len(rel.split("/")) - 1], path


def sent(source, split, example=None, model_type="vl"):
    """The messages the stand-in's own code sends for one record (run here, never by the reader)."""
    sent = []
    processor = types.SimpleNamespace(apply_chat_template=lambda msg, **_: sent.append(msg) or "")
    namespace = {"dataset": [example or EXAMPLE], "processor": processor}
    exec(compile(source, "stand-in", "exec"), namespace)
    namespace["main"](types.SimpleNamespace(split=split, model_type=model_type))
    return sent[0]


def render(messages):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(chat_template("qwen2_5_vl")).render(messages=messages, add_generation_prompt=True)
