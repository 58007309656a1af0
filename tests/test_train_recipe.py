"""Recipe parsing and validation: every published recipe parses, and bad recipes fail before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception_judge.train.recipe import (
    RecipeError,
    check_batch_geometry,
    parse_recipe,
    split_recipe_argv,
    zero_stage,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
GPU_RECIPES = ["flex7b", "flex32b", "qwen3vl4b", "qwen3vl8b"]


def _recipe(tmp_path: Path, text: str) -> str:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return str(p)


BASE = """
model_name_or_path: m
dataset_name: d
output_dir: out
use_cpu: true
bf16: false
max_completion_length: 16
num_generations: 2
per_device_train_batch_size: 2
report_to: none
"""


def test_tiny_recipe_parses_with_overrides():
    r = parse_recipe(
        [
            str(RECIPES / "tiny.yaml"),
            "--dataset_name",
            "other/folder",
            "--output_dir",
            "x",
            "--max_steps",
            "2",
        ]
    )
    assert r.script.dataset_name == "other/folder"
    assert r.training.output_dir == "x"
    assert r.training.max_steps == 2
    assert r.judge.model_provider_options["arch"] == "qwen2_5_vl"
    assert r.judge.reward_funcs == ["judge", "format", "digit_fraction"]
    assert r.training.reward_weights == [1.0, 0.2, 0.1]
    assert r.training.save_steps == 2 and r.training.max_steps <= 6
    # defaults that bite are set explicitly in the recipe
    for key in ("bf16", "max_completion_length", "num_generations", "beta", "loss_type", "report_to"):
        assert key in r.config, key
    assert r.training.report_to == []  # "none"
    assert r.path.endswith("tiny.yaml") and r.overrides[-1] == "2"
    assert r.flat_args()["learning_rate"] == r.training.learning_rate


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_published_recipes_parse_and_cite_sources(name, tmp_path, monkeypatch):
    text = (RECIPES / f"{name}.yaml").read_text()
    assert "Source:" in text and "8 GPUs" in text
    monkeypatch.chdir(tmp_path)  # the recipe's DeepSpeed file is found from any folder
    # bf16 needs a GPU; everything else is validated on CPU as written
    r = parse_recipe([str(RECIPES / f"{name}.yaml"), "--bf16", "false"], check_environment=False)
    t, m, j = r.training, r.model, r.judge
    # a launch without a DeepSpeed --config_file runs ZeRO-3, with gradient checkpointing, fp32 master weights (in
    # DeepSpeed) and a collective timeout past the default 30 minutes
    assert t.deepspeed == str(ROOT / "configs" / "deepspeed" / "zero3.json") and zero_stage(t) == 3
    assert t.gradient_checkpointing and t.ddp_timeout >= 3 * 3600
    assert t.num_generations == 5 and t.temperature == 1.0 and t.top_p == 0.95 and t.top_k == 20
    assert t.beta == 0.01 and t.loss_type == "dapo" and t.lr_scheduler_type == "constant"
    assert j.recipe_num_processes == 8
    # 64 prompts per generation round on the 8 GPUs the recipe assumes
    assert t.per_device_train_batch_size * 8 * t.steps_per_generation // t.num_generations == 64
    # 16 prompts per optimizer step (published PPO mini-batch)
    assert t.per_device_train_batch_size * 8 * t.gradient_accumulation_steps // t.num_generations == 16
    assert j.protocol_mix == {"batch": 1.0}
    # one pixel policy, a multiple of both patch factors; the factor unset: the model config's
    assert j.pixel_policy == {"mode": "fixed", "size": 448} and 448 % 28 == 0 and 448 % 32 == 0
    assert t.use_vllm and t.eval_strategy == "steps" and t.eval_on_start
    expected_lr = {"flex7b": 2.5e-7, "flex32b": 7.5e-6, "qwen3vl4b": 7.5e-7, "qwen3vl8b": 7.5e-7}[name]
    assert t.learning_rate == pytest.approx(expected_lr)
    if name == "flex32b":
        assert m.use_peft and m.lora_r == 32 and m.lora_alpha == 32 and j.lora_exclude_modules == ".*visual.*"
        assert j.base_adapter == "sungnyun/Flex-VL-32B-LoRA"
    else:
        assert not m.use_peft
    if name.startswith("qwen3"):
        assert t.max_completion_length == 32768 and "Thinking" in m.model_name_or_path
    else:
        assert t.max_completion_length == 24576


def test_unknown_recipe_key_is_named_with_a_suggestion(tmp_path):
    path = _recipe(tmp_path, BASE + "learning_rat: 1.0e-6\n")
    with pytest.raises(
        RecipeError,
        match=r"^learning_rat: unknown key of recipe .*r\.yaml \(got 1e-06\); did you mean learning_rate\?$",
    ):
        parse_recipe([path])


def test_unknown_command_line_flag_is_named(tmp_path):
    path = _recipe(tmp_path, BASE)
    with pytest.raises(RecipeError, match="--num_generation"):
        parse_recipe([path, "--num_generation", "4"])
    with pytest.raises(
        RecipeError, match=r"^--num_generationz: unknown argument; did you mean num_generations"
    ):
        parse_recipe([path, "--num_generationz", "4"])
    with pytest.raises(
        RecipeError, match=r"^learning_rate: invalid float value: 'fast'$"
    ):  # argparse's, key first
        parse_recipe([path, "--learning_rate", "fast"])


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("learning_rate: fast", r"^learning_rate: expected a number \(got 'fast'\)$"),
        ("max_steps: 2.5", r"^max_steps: expected an integer \(got 2\.5\)$"),
        ("bf16: maybe", r"^bf16: expected a boolean \(got 'maybe'\)$"),
        ("num_generations: [2, 3]", r"^num_generations: expected a single value, not a list \(got \[2, 3\]\)$"),
        ("num_generations: 2.5", r"^num_generations: expected an integer \(got 2\.5\)$"),
        ("max_steps: true", r"^max_steps: expected a number \(got True\)$"),
        ("loss_type: ppo", r"^loss_type: expected one of grpo, dr_grpo, dapo, .* \(got 'ppo'\)$"),
        ("lr_scheduler_type: wobbly", r"^lr_scheduler_type: expected one of linear, cosine, .* \(got 'wobbly'\)$"),
        ("reward_funcs: [judge, nonsense]", r"^reward_funcs: unknown reward 'nonsense' \(known: batch_ranking, .* or a dotted path\) \(got \['judge', 'nonsense'\]\)$"),
        ("reward_weights: [1.0, 2.0, 3.0]", r"^reward_weights: 3 values for 2 reward_funcs \(judge, format\)"),
        ("reward_ties: sometimes", r"^reward_ties: expected one of zero, half \(got 'sometimes'\)$"),
        ("think_prefix: always", r"^think_prefix: expected one of auto, off \(got 'always'\)$"),
        # the flat image_* keys of older recipes: one line naming the new key
        ("image_mode: stretch", r"^image_mode: unknown key of .* \(got 'stretch'\); now pixel_policy\.mode \("),
        ("image_size: 448", r"^image_size: unknown key of .*; now pixel_policy\.size \(recipe: pixel_policy: \{size: "),
        ("pixel_policy: {mode: stretch}", r"^pixel_policy\.mode: Input should be 'fixed', 'smart' or 'none' \(got 'stretch'\)$"),
        ("pixel_policy: {size: 0}", r"^pixel_policy: pixel policy needs size >= factor >= 1 \(size=0, "),
        ("pixel_policy: {sise: 448}", r"^pixel_policy\.sise: unknown option \(got 448\); known: factor, max_pixels, "),
        ("pixel_policy: smart", r"^--pixel_policy 'smart': expected KEY=VALUE$"),
        ("protocol_mix: {batch: 1, triple: 1}", r"^protocol_mix\.triple: unknown option \(got 1\); known: batch, pair, single$"),
        ("protocol_mix: {batch: 0}", r"^protocol_mix: no protocol has a positive weight \(got \{'batch': 0\}\)$"),
        ("protocol_mix: {batch: -1, pair: 1}", r"^protocol_mix\.batch: Input should be greater than or equal to 0 \(got -1\)$"),
        (
            "model_provider: perception_judge.tiny.models:ensure_tiny_model\nmodel_provider_options: {arch: llama}",
            r"^model_provider_options\.arch: Input should be 'qwen2_5_vl' or 'qwen3_vl' \(got 'llama'\)$",
        ),
        ("model_provider_options: {arch: qwen3_vl}", r"^model_provider_options: given without a model_provider"),
        ("report_to: slack", r"^report_to: unknown tracker; use wandb, tensorboard, trackio, mlflow or none \(got 'slack'\)$"),
        ("temperature: 0", r"^temperature: Input should be greater than 0: GRPO needs sampled groups; .* \(got 0\)$"),
        ("learning_rate: .inf", r"^learning_rate: Input should be a finite number \(got inf\)$"),
        ("max_steps: 0", r"^max_steps: Input should be greater than or equal to 1: or -1 to train num_train_epochs \(got 0\)$"),
        ("vllm_mode: remote", r"^vllm_mode: expected one of colocate, server \(got 'remote'\)$"),
        ("vllm_tensor_parallel_size: 0", r"^vllm_tensor_parallel_size: Input should be greater than or equal to 1 \(got 0\)$"),
        ("vllm_gpu_memory_utilization: 1.5", r"^vllm_gpu_memory_utilization: Input should be less than or equal to 1 \(got 1.5\)$"),
        ("output_dir: {a: 1}", r"^output_dir: expected a single value, not a mapping \(got \{'a': 1\}\)$"),
    ],
)  # fmt: skip
def test_invalid_values_fail_naming_the_key(tmp_path, line, pattern):
    path = _recipe(tmp_path, BASE + line + "\n")
    with pytest.raises(RecipeError, match=pattern):
        parse_recipe([path], check_environment=False)


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (
            "reward_tau: 50",
            r"^reward_tau: Input should be less than or equal to 10: .*none is 'correct' \(got 50\)$",
        ),
        (
            "reward_tau: .nan",
            r"^reward_tau: Input should be a finite number: scores are 1-10 .* \(got nan\)$",
        ),
        (
            "reward_tau: 1",
            r"^reward_tau: Input should be greater than 1: .*no verdict is 'incorrect'.* \(got 1\)$",
        ),
        ("reward_weights: [1.0, .inf]", r"^reward_weights\.1: Input should be a finite number \(got inf\)$"),
        ("reward_weights: [.nan, 1.0]", r"^reward_weights\.0: Input should be a finite number \(got nan\)$"),
        (
            "reward_weights: [0, 0.0]",
            r"^reward_weights: all 0: no reward would train; .* \(got \[0, 0\.0\]\)$",
        ),
    ],
)
def test_reward_options_that_make_a_reward_constant_or_unreachable_are_refused(tmp_path, line, pattern):
    """With tau 50 no correct verdict earns reward, with NaN none at all; weights must be finite, one non-zero."""
    with pytest.raises(RecipeError, match=pattern):
        parse_recipe([_recipe(tmp_path, BASE + line + "\n")], check_environment=False)
    with pytest.raises(RecipeError, match=r"^reward_tau: Input should be a finite number: .* \(got nan\)$"):
        parse_recipe([_recipe(tmp_path, BASE), "--reward_tau", "nan"], check_environment=False)
    for tau in ("1.5", "10"):  # both verdicts reachable on the 1-10 scale
        assert parse_recipe([_recipe(tmp_path, BASE), "--reward_tau", tau], check_environment=False)


def test_batch_geometry_error_names_the_numbers():
    values = dict(per_device_train_batch_size=3, gradient_accumulation_steps=1, num_generations=2)
    split = r"^num_generations: .* = 3 × 1 × 1 = 3 completions per generation round with 1 process\(es\) would split "
    with pytest.raises(
        RecipeError, match=split + r".*\(e\.g\. per_device_train_batch_size=2 .*\) \(got 2\)$"
    ):
        check_batch_geometry(values, 1)
    check_batch_geometry(values | {"steps_per_generation": 2}, 1)  # 6 completions: fine
    check_batch_geometry(values, 2)  # 3 × 2 processes = 6: fine
    with pytest.raises(
        RecipeError, match=r"^steps_per_generation: set it or generation_batch_size, not both \(got 2\)$"
    ):
        check_batch_geometry(values | {"steps_per_generation": 2, "generation_batch_size": 6}, 1)
    with pytest.raises(
        RecipeError,
        match=r"^steps_per_generation: it or gradient_accumulation_steps=2 must divide .*\(got 3\)$",
    ):
        check_batch_geometry(
            dict(values, per_device_train_batch_size=2)
            | {"gradient_accumulation_steps": 2, "steps_per_generation": 3},
            1,
        )
    with pytest.raises(
        RecipeError,
        match=r"^per_device_eval_batch_size: the validation batch 3 × 1 with 1 process\(es\) is not a multiple of num_generations_eval=2 \(got 3\)$",
    ):
        check_batch_geometry(
            dict(values, per_device_train_batch_size=2, eval_strategy="steps", per_device_eval_batch_size=3),
            1,
        )


def test_geometry_is_checked_for_the_recipe_gpu_count_too(tmp_path, monkeypatch):
    # launched on 2 processes: 2 x 2 = 4 completions per round, whole groups of 4; the 3 GPUs the recipe
    # claims would give 2 x 3 = 6, which splits groups
    monkeypatch.setenv("WORLD_SIZE", "2")
    path = _recipe(tmp_path, BASE.replace("num_generations: 2", "num_generations: 4"))
    with pytest.raises(RecipeError, match=r"with 3 process\(es\) \(recipe_num_processes\)"):
        parse_recipe([path, "--recipe_num_processes", "3"], check_environment=False)
    with pytest.raises(RecipeError, match=r"with 2 process"):
        parse_recipe([path, "--per_device_train_batch_size", "1"], check_environment=False)


def test_a_deepspeed_file_resolves_against_its_recipe_and_must_exist(tmp_path, monkeypatch):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}')
    path = str(tmp_path / "recipes" / "r.yaml")
    Path(path).write_text(BASE + "deepspeed: ../ds.json\n")
    monkeypatch.chdir(ROOT)
    t = parse_recipe([path], check_environment=False).training
    assert t.deepspeed == str(tmp_path / "ds.json") and zero_stage(t) == 2 and t.deepspeed_plugin is None
    with pytest.raises(RecipeError, match=r"^deepspeed: no such file \(got '/[^']*/nope\.json'\)$"):
        parse_recipe([_recipe(tmp_path, BASE + "deepspeed: nope.json\n")], check_environment=False)
    with pytest.raises(
        RecipeError, match=r"^deepspeed: no such file \(got 'ds\.json'\)$"
    ):  # the command line: from the cwd
        parse_recipe([path, "--deepspeed", "ds.json"], check_environment=False)
    (tmp_path / "bad.json").write_text('{"bf16": {}}')
    with pytest.raises(
        RecipeError,
        match=r"^deepspeed: not a DeepSpeed configuration \(KeyError\('zero_optimization'\)\) \(got '",
    ):
        parse_recipe([path, "--deepspeed", str(tmp_path / "bad.json")], check_environment=False)
    assert parse_recipe([path, "--deepspeed", "none"], check_environment=False).training.deepspeed is None


def test_a_deepspeed_launch_configuration_replaces_the_recipes_of_its_stage_and_refuses_another(monkeypatch):
    """accelerate refuses a DeepSpeed --config_file next to TrainingArguments.deepspeed; the launch's settings win
    when they run the recipe's ZeRO stage (offload, say), another stage is refused before anything loads."""
    from perception_judge.train.recipe import _check_deepspeed

    recipe, ds = str(RECIPES / "flex7b.yaml"), str(ROOT / "configs" / "deepspeed" / "zero3.json")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(
        "perception_judge.train.recipe._importable", lambda name: True
    )  # CI may lack DeepSpeed
    with pytest.raises(
        RecipeError,
        match=r"^deepspeed: ZeRO-3, the launch configuration ZeRO-2: .*--deepspeed none .*\(got '.*zero3\.json'\)$",
    ):
        parse_recipe([recipe, "--bf16", "false"], check_environment=False)
    assert _check_deepspeed(values := {"deepspeed": "none"}, False) == (None, [])
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    note = f"the launch's DeepSpeed settings (ZeRO-3) replace deepspeed: {ds}"
    for check in (True, False):
        assert _check_deepspeed(values := {"deepspeed": ds, "use_cpu": True}, check) == (None, [note])
        assert values["deepspeed"] is None
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    assert _check_deepspeed(values := {"deepspeed": ds, "use_cpu": True}, False) == (ds, [])
    assert values["deepspeed"] is None  # inspecting a recipe sets no DeepSpeed up
    assert _check_deepspeed(values := {"deepspeed": ds, "use_cpu": True}, True) == (ds, [])
    assert values["deepspeed"] == ds
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(
        RecipeError, match=r"^use_cpu: DeepSpeed without a GPU needs use_cpu: true \(got None\)$"
    ):
        _check_deepspeed({"deepspeed": ds}, True)
    monkeypatch.delenv("LOCAL_RANK")  # `python train_grpo.py`: DeepSpeed would look for MPI
    with pytest.raises(
        RecipeError, match=r"^deepspeed: DeepSpeed needs a distributed launch: torchrun, or accelerate launch"
    ):
        _check_deepspeed({"deepspeed": ds, "use_cpu": True}, True)
    monkeypatch.setattr("perception_judge.train.recipe._importable", lambda name: False)
    with pytest.raises(RecipeError, match=r"^deepspeed: DeepSpeed is not installed"):
        _check_deepspeed({"deepspeed": ds, "use_cpu": True}, True)


def test_colocate_vllm_requires_one_image_size(tmp_path):
    path = _recipe(tmp_path, BASE + "use_vllm: true\nvllm_mode: colocate\npixel_policy: {mode: smart}\n")
    with pytest.raises(
        RecipeError, match=r"^pixel_policy\.mode: mixed image sizes .*\(trl#6401\).* \(got 'smart'\)$"
    ):
        parse_recipe([path], check_environment=False)
    parse_recipe([path, "--vllm_mode", "server"], check_environment=False)
    parse_recipe([path, "--pixel_policy", "mode=fixed"], check_environment=False)


def test_environment_checks_name_the_missing_package(tmp_path, monkeypatch):
    import perception_judge.train.recipe as recipe_mod

    monkeypatch.setattr(recipe_mod, "_importable", lambda name: False)
    with pytest.raises(
        RecipeError,
        match=r"^use_vllm: vLLM is not installed \(`pip install -e '\.\[gpu\]'`\), or set it false \(got True\)$",
    ):
        parse_recipe([_recipe(tmp_path, BASE + "use_vllm: true\n")])
    with pytest.raises(
        RecipeError,
        match=r"^report_to: not installed \(`pip install wandb`\), or set report_to: none \(got 'wandb'\)$",
    ):
        parse_recipe([_recipe(tmp_path, BASE.replace("report_to: none", "report_to: wandb"))])


def test_recipe_argv_forms():
    assert split_recipe_argv(["r.yaml", "--a", "1"]) == ("r.yaml", ["--a", "1"])
    assert split_recipe_argv(["--config", "r.yaml", "--a", "1"]) == ("r.yaml", ["--a", "1"])
    assert split_recipe_argv(["--a", "1"]) == (None, ["--a", "1"])
    # --set KEY=VALUE is --KEY VALUE, --set MAPPING.KEY=VALUE --MAPPING KEY=VALUE, in command-line order
    sets = ["--set", "learning_rate=1e-6", "--a", "1", "--set", "pixel_policy.size=84", "--set", "x=a=b"]
    assert split_recipe_argv(["r.yaml", *sets]) == (
        "r.yaml", ["--learning_rate", "1e-6", "--a", "1", "--pixel_policy", "size=84", "--x", "a=b"])  # fmt: skip
    with pytest.raises(RecipeError, match=r"^--config: a second recipe besides 'a\.yaml' \(got 'b\.yaml'\)$"):
        split_recipe_argv(["a.yaml", "--config", "b.yaml"])
    for argv, message in ((["--set"], r"^--set: expected a value, none given$"),
                          (["--set", "lr"], r"^--set 'lr': expected KEY=VALUE$")):  # fmt: skip
        with pytest.raises(RecipeError, match=message):
            split_recipe_argv(argv)


def test_missing_recipe_and_required_fields(tmp_path):
    with pytest.raises(RecipeError, match=r"^recipe '.*nope\.yaml' does not exist$"):
        parse_recipe([str(tmp_path / "nope.yaml")])
    with pytest.raises(
        RecipeError,
        match=r"^dataset_name: required, not given \(the folder `perception-judge export` writes\)$",
    ):
        parse_recipe([_recipe(tmp_path, BASE.replace("dataset_name: d", ""))], check_environment=False)


def test_protocol_mix_forms(tmp_path):
    path = _recipe(tmp_path, BASE)
    r = parse_recipe([path, "--protocol_mix", "batch=0.5,pair=0.5"], check_environment=False)
    assert r.judge.protocol_mix == {"batch": 0.5, "pair": 0.5}
    assert parse_recipe([path, "--protocol_mix", "batch"], check_environment=False).judge.protocol_mix == {
        "batch": 1.0
    }
    assert parse_recipe([path], check_environment=False).judge.protocol_mix is None
    # the command line replaces the recipe's mix (a protocol it leaves out is dropped)
    mixed = _recipe(tmp_path, BASE + "protocol_mix: {batch: 0.6, pair: 0.4}\n")
    assert parse_recipe(
        [mixed, "--set", "protocol_mix=pair=1"], check_environment=False
    ).judge.protocol_mix == {"pair": 1.0}


def test_the_pixel_policy_is_one_mapping_the_command_line_updates(tmp_path, tiny_qwen3):
    """Issue 42: the recipe's pixel policy is ``core.images.PixelPolicy``'s mapping (the run file's and the eval
    plan's shape); ``--pixel_policy KEY=VALUE,...`` (``--set pixel_policy.KEY=VALUE``) updates the recipe's, and the
    unset factor and least area come from the model when the run starts."""
    from transformers import AutoConfig

    from perception_judge.core.images import PixelPolicy
    from perception_judge.train.data import pixel_policy_for

    path = _recipe(tmp_path, BASE + "pixel_policy: {mode: smart, max_pixels: 50176}\n")
    r = parse_recipe([path, "--pixel_policy", "size=64,max_pixels=65536"], check_environment=False)
    assert r.judge.pixel_policy == {"mode": "smart", "max_pixels": 65536, "size": 64}
    assert r.flat_args()["pixel_policy"] == {"mode": "smart", "max_pixels": 65536, "size": 64}
    r = parse_recipe([path, "--set", "pixel_policy.size=64"], check_environment=False)
    assert r.judge.pixel_policy == {"mode": "smart", "max_pixels": 50176, "size": 64}
    policy = pixel_policy_for(r.judge, AutoConfig.from_pretrained(tiny_qwen3))
    assert policy == PixelPolicy(mode="smart", size=64, max_pixels=50176, factor=32, min_pixels=56 * 56)
    with pytest.raises(
        RecipeError, match=r"^pixel_policy\.size: Input should be a valid integer, unable to parse "
    ):
        parse_recipe([path, "--pixel_policy", "size=big"], check_environment=False)


# ----------------------------------------------------------------------------------------------------------
# memory on 80 GB GPUs (perception_judge.train.memory, docs/training.md)
# ----------------------------------------------------------------------------------------------------------


def test_memory_shapes_count_the_published_and_the_built_models(tiny_qwen25, tiny_qwen3):
    from transformers import AutoConfig, AutoModelForImageTextToText

    from perception_judge.train.memory import PUBLISHED, shape_of

    published = {
        "qwen2_5_vl_7b": 8.29e9,
        "qwen2_5_vl_32b": 33.5e9,
        "qwen3_vl_4b": 4.44e9,
        "qwen3_vl_8b": 8.77e9,
    }
    for name, count in published.items():  # the model cards' parameter counts
        assert abs(PUBLISHED[name].params() / count - 1) < 0.01, name
    for folder in (tiny_qwen25, tiny_qwen3):
        config = AutoConfig.from_pretrained(folder)
        built = AutoModelForImageTextToText.from_config(config).num_parameters()
        assert abs(shape_of(config).params() / built - 1) < 0.02  # norms and biases left out


# recipe-memory's table (docs/training.md "Memory on 80 GB GPUs"): GiB per GPU on 8 x 80 GB under ZeRO-3, the stage
# every GPU recipe's DeepSpeed configuration sets; each term pinned to 0.1 GiB, the KV cache to the token
MEMORY_TERMS = (
    "training_state", "reference_model", "zero_buffers", "checkpoints", "attention_mask", "recomputed_layer",
    "lm_head", "autocast_copies", "eval_forward", "sync_gather", "sync_trl_all_at_once", "vllm_engine",
    "vllm_weights", "activations", "training", "evaluation", "weight_sync", "generation", "budget", "peak",
    "vllm_kv_cache_tokens",
)  # fmt: skip
MEMORY_TABLE = {
    "flex7b": (15.4, 1.9, 3.0, 5.4, 0.8, 8.5, 4.0, 0.0, 18.3, 1.0, 1.0, 28.0, 7.7, 14.6, 63.0, 66.6, 49.4, 48.3, 76.0, 66.6, 684499),
    "flex32b": (8.3, 0.0, 3.4, 17.5, 0.8, 12.1, 1.2, 0.0, 50.3, 1.7, 62.3, 44.0, 31.2, 30.4, 43.1, 63.0, 44.6, 55.7, 76.0, 63.0, 88852),
    "qwen3vl4b": (8.3, 1.0, 2.7, 6.3, 1.3, 6.6, 3.0, 0.0, 31.8, 0.7, 0.7, 28.0, 4.1, 14.2, 54.2, 71.8, 40.7, 40.0, 76.0, 71.8, 318468),
    "qwen3vl8b": (16.3, 2.0, 3.1, 10.1, 1.3, 8.5, 4.7, 0.0, 19.7, 1.2, 1.2, 28.0, 8.2, 19.9, 69.4, 69.2, 50.6, 49.5, 76.0, 69.4, 259751),
}  # fmt: skip


def _memory(name: str, *overrides: str, stage: int = 3, world: int = 8) -> dict:
    from perception_judge.train.memory import MODEL_SHAPES, PUBLISHED, estimate

    recipe = parse_recipe(
        [str(RECIPES / f"{name}.yaml"), "--bf16", "false", *overrides], check_environment=False
    )
    return estimate(recipe, PUBLISHED[MODEL_SHAPES[recipe.model.model_name_or_path]], world, stage=stage)


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_the_memory_table_of_every_gpu_recipe(name):
    parts = _memory(name)
    assert list(parts) == list(MEMORY_TERMS)
    for term, value in zip(MEMORY_TERMS, MEMORY_TABLE[name], strict=True):
        close = parts[term] == value if isinstance(value, int) else abs(parts[term] - value) < 0.051
        assert close, (term, parts[term])


def test_memory_terms_follow_trl_and_transformers_code():
    """Each formula on a made-up shape (H 8, I 16, 2 heads of 4, 1 KV head, V 100), numbers worked by hand."""
    from dataclasses import replace

    from perception_judge.train.memory import Shape, head_bytes, layer_bytes

    toy = Shape(8, 2, 16, 2, 1, 4, 100, False, 4, 1, 8, 3, 2)
    # norms 16H, q and attention output 4q, k and v repeated to q's width by sdpa's masked path 4q, MLP 12I, and the
    # gradient of the largest weight (8 x 16) when the layer trains; flash attention keeps k and v at kv's width
    assert layer_bytes(toy, 10) == 10 * (16 * 8 + 4 * 8 + 4 * 8 + 12 * 16) + 2 * 128
    assert layer_bytes(toy, 10, sdpa=False, trains=False) == 10 * (16 * 8 + 4 * 8 + 4 * 4 + 12 * 16)
    # the fused head: a 5 x 32,768 bf16 tile, 8 B x N x H, 6 B x V x H when it trains (fp32 gradient + bf16 copy)
    assert head_bytes(toy, 5, trains=True) == 2 * 5 * 32768 + 8 * 5 * 8 + 6 * 100 * 8
    assert head_bytes(toy, 5, trains=False) == 2 * 5 * 32768 + 8 * 5 * 8
    # without Triton (CPU): 4,096 positions per tile at most, torch's fold holds 35 B per tile element
    assert head_bytes(toy, 5000, trains=False, triton=False) == 35 * 4096 * 32768 + 8 * 5000 * 8
    # or, for a wide model, fp32 copies of the tile and of a 32,768 x H weight chunk in the gradient products
    wide = replace(toy, hidden=3584)
    chunk = 4 * 32768 * 3584
    assert head_bytes(wide, 64, trains=False, triton=False) == 6 * 64 * 32768 + chunk + 8 * 64 * 3584


def test_memory_by_zero_stage_and_tuning():
    """flex7b (P = 8.29 B, full fine-tuning) and flex32b (LoRA r32 on a 33.45 B base) on 8 GPUs by ZeRO stage:
    16 B per trained parameter, of which ZeRO-1 / 2 / 3 shard 12 / 14 / 16; the reference model and LoRA's base
    sharded by ZeRO-3 only; DDP's gradient buckets; the weight sync's gathers (trl's own gathers all 33.45 B)."""
    gib, p7, p32 = 2**30, 8_291_317_760, 33_451_079_680  # Shape.params() of the published configs
    lora = 64 * 32 * (2 * (5120 + 5120) + 2 * (5120 + 1024) + 3 * (5120 + 27648))  # r32 on q, k, v, o, MLP
    expected = {  # stage: training_state, reference_model, zero_buffers, sync_gather, sync_trl_all_at_once
        ("flex7b", 0): (16 * p7, 2 * p7, 4 * p7, 0, 0),
        ("flex7b", 1): (4 * p7 + 12 * p7 / 8, 2 * p7, 2e9, 0, 0),
        ("flex7b", 2): (2 * p7 + 14 * p7 / 8, 2 * p7, 2e9, 0, 0),
        ("flex7b", 3): (16 * p7 / 8, 2 * p7 / 8, 2 * (1.05e9 + 152064 * 3584), 2 * 152064 * 3584, 2 * 152064 * 3584),
        ("flex32b", 2): (2 * lora + 14 * lora / 8 + 2 * p32, 0, 2e9, 2 * 5120 * 27648, 0),
        ("flex32b", 3): (16 * lora / 8 + 2 * p32 / 8, 0, 2 * (1.05e9 + 152064 * 5120),
                         2 * 152064 * 5120 + 2 * 5120 * 27648, 2 * p32),
    }  # fmt: skip
    terms = ("training_state", "reference_model", "zero_buffers", "sync_gather", "sync_trl_all_at_once")
    for (name, stage), values in expected.items():
        parts = _memory(name, stage=stage)
        for term, value in zip(terms, values, strict=True):
            assert abs(parts[term] - value / gib) < 1e-6, (name, stage, term)
    assert _memory("flex7b", stage=0, world=1)["zero_buffers"] == 0  # one process: no DDP
    # without DeepSpeed autocast keeps a bf16 copy of every fp32 weight until the forward ends
    ddp = _memory("flex7b", stage=0)
    assert ddp["autocast_copies"] == pytest.approx(2 * p7 / gib) and 2 * p7 / gib > ddp["recomputed_layer"]
    assert ddp["activations"] == pytest.approx(ddp["checkpoints"] + ddp["attention_mask"] + 2 * p7 / gib)


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_gpu_recipes_fit_80_gb_and_sleep_only_where_the_engine_would_not_fit_awake(name):
    """At the maximum lengths every GPU recipe fits an 80 GB GPU next to its colocated engine; the recipe sleeps the
    engine exactly when it would not fit awake; the published micro-batch of 5 does not fit."""
    fit = _memory(name)
    assert fit["peak"] <= fit["budget"] and fit["vllm_kv_cache_tokens"] > 28672
    t = parse_recipe([str(RECIPES / f"{name}.yaml"), "--bf16", "false"], check_environment=False).training
    assert (
        t.per_device_train_batch_size * t.gradient_accumulation_steps * 8 == 80
    )  # published: 16 prompts x 5
    assert t.per_device_train_batch_size * t.steps_per_generation * 8 == 320  # published: 64 prompts x 5
    published = _memory(name, "--per_device_train_batch_size", "5", "--gradient_accumulation_steps", "2",
                        "--steps_per_generation", "8")  # fmt: skip
    assert published["peak"] > published["budget"]
    awake = _memory(name, "--vllm_enable_sleep_mode", "false")
    assert t.vllm_enable_sleep_mode == (awake["peak"] > awake["budget"])
    asleep = _memory(
        name, "--vllm_enable_sleep_mode", "true"
    )  # the engine frees all but 1 GiB for the update
    assert asleep["training"] == pytest.approx(awake["training"] - awake["vllm_engine"] + 1.0)


def test_recipe_memory_command_exits_1_when_a_recipe_does_not_fit(capsys, tmp_path):
    from perception_judge.cli import main

    assert main(["recipe-memory", "--zero-stage", "3", str(RECIPES / "flex7b.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "fits" and "ZeRO-3" in out.splitlines()[0]
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == list(MEMORY_TERMS)  # each term once
    assert "  vllm_kv_cache_tokens     684,499 tokens" in out.splitlines()  # a count of tokens is an integer
    assert main(["recipe-memory", "--zero-stage", "3", str(RECIPES / "flex7b.yaml"), "--per_device_train_batch_size",
                 "5", "--gradient_accumulation_steps", "2", "--steps_per_generation", "8"]) == 1  # fmt: skip
    assert "does NOT fit: training needs" in capsys.readouterr().out
    qwen3vl8b = str(RECIPES / "qwen3vl8b.yaml")
    assert main(["recipe-memory", "--zero-stage", "3", "--gpu-gib", "40", qwen3vl8b]) == 1  # 40 GB cards
    assert main(["recipe-memory", "--zero-stage", "2", qwen3vl8b]) == 1  # weights and reference unsharded
    assert (
        "does NOT fit: training needs 96.7 GiB per GPU of 76.0 (ZeRO-2)"
        in capsys.readouterr().out.splitlines()[-1]
    )
    assert (
        main(["recipe-memory", "--zero-stage", "0", str(RECIPES / "flex7b.yaml")]) == 1
    )  # DDP: 124 GiB of state
    last = capsys.readouterr().out.splitlines()[-1]  # no batch size can help: sharding or LoRA only
    assert last.endswith("of 76.0 (ZeRO-0): DeepSpeed ZeRO-3 or its offload, LoRA (use_peft: true)"), last
    # its options from a config file and --set too (flags win): 40 GB cards do not fit flex7b, 80 GB do
    config = tmp_path / "memory.yaml"
    config.write_text(f"recipe: {RECIPES / 'flex7b.yaml'}\nzero_stage: 3\ngpu_gib: 40\n")
    assert main(["recipe-memory", "--config", str(config)]) == 1
    assert "flex7b.yaml on 8 x 40 GiB, ZeRO-3" in capsys.readouterr().out
    assert main(["recipe-memory", "--config", str(config), "--set", "gpu_gib=80"]) == 0
    assert main(["recipe-memory", "--config", str(config), "--set", "gpu_gib=60", "--gpu-gib", "80"]) == 0
    assert main(["recipe-memory", "--set", "world=0", str(RECIPES / "flex7b.yaml")]) == 2
    assert capsys.readouterr().err.endswith(
        "error: world: Input should be greater than or equal to 1 (got 0)\n"
    )


def test_the_zero_stage_comes_from_the_deepspeed_plugin_the_configuration_or_the_launch(
    tmp_path, monkeypatch
):
    from types import SimpleNamespace

    from perception_judge.train.recipe import zero_stage

    for var in (
        "ACCELERATE_DEEPSPEED_ZERO_STAGE",
        "ACCELERATE_USE_DEEPSPEED",
        "ACCELERATE_DEEPSPEED_CONFIG_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    config = tmp_path / "ds.json"
    config.write_text('{"zero_optimization": {"stage": 2}}')
    assert zero_stage(SimpleNamespace(deepspeed=str(config))) == 2
    assert zero_stage(SimpleNamespace(deepspeed={"zero_optimization": {"stage": 3}})) == 3
    plugin = SimpleNamespace(zero_stage=1)
    assert zero_stage(SimpleNamespace(deepspeed=str(config), deepspeed_plugin=plugin)) == 1
    assert zero_stage(SimpleNamespace(deepspeed=None)) is None  # none: estimate() counts it as stage 0
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # as a DeepSpeed `accelerate launch` sets it
    assert zero_stage(SimpleNamespace(deepspeed=None)) == 3


def test_the_preflight_refuses_what_cannot_fit_before_any_model_loads(
    tiny_qwen25, tmp_path, monkeypatch, capsys
):
    """train_grpo.py on the tiny judge with 30,000-token completions (4 sequences' sdpa mask: 3.8 GiB) and CUDA device
    0 reported as 8 GiB (a 4 GiB budget): one error line naming what to change, no model loaded; --skip_memory_check,
    or 80 GiB, goes on to the model loader (patched here to stop the run where the weights would load)."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForImageTextToText

    from perception_judge.tiny.toyset import write_toy_training_set
    from perception_judge.train.run import main

    gpu, loads = [8.0], []

    def load(*args, **kwargs):
        loads.append(args)
        raise RuntimeError("the weights would load here")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=gpu[0] * 2**30)
    )
    monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", load)
    data = write_toy_training_set(tmp_path / "data", n_train=8, n_validation=2)
    argv = [str(RECIPES / "tiny.yaml"), "--model_name_or_path", str(tiny_qwen25), "--dataset_name", str(data),
            "--output_dir", str(tmp_path / "out"), "--max_completion_length", "30000"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("train_grpo.py: error: memory: ")]
    assert len(errors) == 1 and "Traceback" not in err and not loads, err
    assert (
        "training needs 4.2 GiB per GPU of 4.0 (ZeRO-0): lower per_device_train_batch_size, DeepSpeed ZeRO-3 or "
        "its offload, LoRA (use_peft: true)" in errors[0]
    )
    assert errors[0].endswith("(--skip_memory_check true to start anyway)")
    with pytest.raises(RuntimeError, match="the weights would load here"):
        main([*argv, "--skip_memory_check", "true"])
    gpu[0] = 80.0
    with pytest.raises(RuntimeError, match="the weights would load here"):
        main(argv)
    assert len(loads) == 2


@pytest.mark.slow
def test_the_arithmetic_matches_measured_cpu_peaks_on_the_7b_layout():
    """bench/bench_memory_7b_layout.py --quick (about 3 minutes, under 10 GiB of memory): a training micro-step with
    the LM head trained, one with it frozen, and a validation forward through the project's trainer on the 2-layer
    Qwen2.5-VL-7B layout, each peak within 25% of ``estimate``'s prediction for the same shapes."""
    import json
    import subprocess
    import sys

    bench = ROOT / "bench" / "bench_memory_7b_layout.py"
    proc = subprocess.run(
        [sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    mark = "BENCH_RESULT "
    results = {(r := json.loads(line[len(mark) :]))["name"]: r["value"] for line in proc.stdout.splitlines()
               if line.startswith(mark)}  # fmt: skip
    ratios = [value for name, value in results.items() if name.endswith("_predicted_over_measured")]
    assert len(ratios) == 3 and all(0.75 <= ratio <= 1.25 for ratio in ratios), results
