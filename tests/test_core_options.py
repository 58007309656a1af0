"""core.options: one typed model per job, flags generated from it, --config / --set, one precedence, one error
format."""

from __future__ import annotations

import argparse
from typing import Annotated, Literal

import pytest
from pydantic import Field

from perception_judge.core.options import (
    CommaList,
    Flag,
    OptionError,
    Options,
    add_flags,
    key_values,
    options_from_args,
    parse_set,
    resolve_options,
)


class Sampling(Options):
    temperature: float = 0.7
    top_p: float | None = 0.95
    max_tokens: int = 4096


class Teacher(Options):
    kind: Annotated[Literal["auto", "llm"], Flag("--teacher")] = "auto"
    """which teacher"""
    base_urls: Annotated[CommaList, Flag("--base-url")] = Field(default_factory=list)
    """server URL, repeatable"""
    seed: int = 0
    """sampling seed"""
    rewrite: Sampling = Sampling()
    backoff_s: float = 1.0  # undocumented: no flag


class Build(Options):
    out: str | None = None
    """output folder"""
    limit: Annotated[int | None, Field(ge=0)] = None
    """at most this many items"""
    retry_failed: bool = False
    """retry failed keys"""
    progress: bool | None = None
    """progress bar"""
    mapping: Annotated[dict[str, str], Flag("--map", "FIELD=COLUMN")] = Field(default_factory=dict)
    """field mapping"""


class Job(Options):
    teacher: Teacher = Teacher()
    """the teacher"""
    build: Build = Build()
    """the run"""


class Flat(Options):
    n: int
    """how many"""
    seed: int = 3
    """the seed"""
    api_key: str | None = None


def _parser(model) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="job")
    add_flags(p, model)
    return p


def _opts(model, argv, where=""):
    return options_from_args(model, _parser(model).parse_args(argv), where)


def test_flags_come_from_the_documented_fields_with_their_help_and_defaults():
    text = _parser(Job).format_help()
    for flag in ("--config", "--set", "--teacher", "--base-url", "--seed", "--out", "--limit", "--retry-failed",
                 "--progress", "--no-progress", "--map"):  # fmt: skip
        assert flag in text, flag
    assert "--backoff-s" not in text and "--rewrite" not in text  # undocumented: config / --set only
    assert "{auto,llm}" in text and "FIELD=COLUMN" in text and "sampling seed (default 0)" in text
    assert "teacher (config section 'teacher')" in text
    assert "--no-retry-failed" not in text  # a switch that defaults to False


def test_precedence_defaults_config_set_flags(tmp_path):
    cfg = tmp_path / "job.yaml"
    cfg.write_text(
        "teacher: {seed: 1, kind: llm, base_urls: [http://a/v1]}\nbuild: {limit: 5, out: from-config}\n"
    )
    o = _opts(Job, ["--config", str(cfg), "--set", "teacher.seed=2", "--set", "build.limit=6", "--seed", "3"])
    assert o.teacher.seed == 3  # flag > --set > config
    assert o.build.limit == 6  # --set > config
    assert o.build.out == "from-config" and o.teacher.kind == "llm"  # config > defaults
    assert o.teacher.base_urls == ["http://a/v1"] and o.teacher.backoff_s == 1.0 and o.build.progress is None
    assert _opts(Job, ["--base-url", "http://b/v1", "--base-url", "http://c/v1"]).teacher.base_urls == [
        "http://b/v1",
        "http://c/v1",
    ]
    switches = _opts(Job, ["--no-progress", "--retry-failed"]).build
    assert (switches.progress, switches.retry_failed) == (False, True)


def test_a_partial_sub_model_keeps_the_defaults_of_its_field(tmp_path):
    o = _opts(Job, ["--set", "teacher.rewrite.max_tokens=8192"])
    assert o.teacher.rewrite == Sampling(temperature=0.7, top_p=0.95, max_tokens=8192)
    assert Teacher.parse({"rewrite": {"top_p": None}}).rewrite.temperature == 0.7


def test_dict_flags_add_to_the_mapping_below_them(tmp_path):
    cfg = tmp_path / "job.yaml"
    cfg.write_text("build: {mapping: {image: img, question: q}}\n")
    o = _opts(Job, ["--config", str(cfg), "--map", "question=prompt", "--map", "answer=gt,response=chosen"])
    assert o.build.mapping == {"image": "img", "question": "prompt", "answer": "gt", "response": "chosen"}
    assert _opts(Job, ["--map", "image=a,b"]).build.mapping == {"image": "a,b"}  # a comma inside a value
    with pytest.raises(OptionError, match="--map 'image': expected FIELD=COLUMN"):
        _opts(Job, ["--map", "image"])


def test_one_error_format_names_where_key_value_and_what_is_allowed():
    with pytest.raises(OptionError) as e:
        _opts(Job, ["--teacher", "human"], "build-ppjd")
    assert str(e.value) == "build-ppjd.teacher.kind: Input should be 'auto' or 'llm' (got 'human')"
    with pytest.raises(OptionError) as e:
        _opts(Job, ["--set", "build.colour=red"])
    message = str(e.value)
    assert message.startswith("build.colour: unknown option (got 'red'); known: limit, mapping, out")
    with pytest.raises(OptionError, match=r"^build\.limit: Input should be greater than .* \(got '-1'\)"):
        _opts(Job, ["--limit", "-1"])
    with pytest.raises(OptionError, match=r"teacher\.seed: Input should be a valid integer.*\(got 'x'\)"):
        _opts(Job, ["--seed", "x"])
    with pytest.raises(OptionError, match=r"^synth\.n: required, not given \(flag --n\)$"):
        _opts(Flat, [], "synth")
    with pytest.raises(OptionError) as e:  # a secret-looking value never reaches the message
        Flat.parse({"n": 1, "api_key": 5, "token": "sk-abcdefghijklmnopqrstuv"}, "x")
    assert "sk-abc" not in str(e.value) and "x.token: unknown option (got '<redacted>')" in str(e.value)
    with pytest.raises(OptionError, match="unknown bias-suite option"):
        Flat.parse({"n": 1, "colour": 1}, "bias", "bias-suite option(s)")


def test_config_file_and_set_errors_name_the_file_or_the_item(tmp_path):
    with pytest.raises(OptionError, match="does not exist"):
        resolve_options(Job, config=tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("teacher: [unclosed\n")
    with pytest.raises(OptionError, match=r"bad\.yaml' is not valid YAML"):
        resolve_options(Job, config=tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(OptionError, match="expected a mapping"):
        resolve_options(Job, config=tmp_path / "list.yaml")
    with pytest.raises(OptionError, match="expected KEY=VALUE"):
        resolve_options(Job, sets=["teacher.seed"])
    with pytest.raises(OptionError, match=r"^teacher\.seed: is 4, not a mapping"):
        resolve_options(Job, sets=["teacher.seed=4", "teacher.seed.x=1"])
    with pytest.raises(OptionError, match="teacher: Input should be a valid dictionary"):
        resolve_options(Job, sets=["teacher=3"])


def test_one_key_value_parser_for_set_dict_flags_and_recipe_mappings():
    """``key_values`` reads ``--set`` (one pair, the value whole), dict flags (comma-separated pairs) and the recipe's
    ``name=value,name`` mappings (a bare name takes the default)."""
    assert key_values(["a=1,b=2", "c = x"], "--map") == {"a": "1", "b": "2", "c": "x"}
    assert key_values(["image=a,b"], "--map") == {"image": "a,b"}  # a comma inside a value
    assert key_values(["mix=batch=1,pair=1"], "--set", split=False) == {"mix": "batch=1,pair=1"}
    assert key_values(["judge=2,format"], "reward_weights", default="1") == {"judge": "2", "format": "1"}
    for entry, kw in (("image", {}), ("=1", {}), ("a=1,", {"default": "1"})):
        with pytest.raises(OptionError, match=f"^--map {entry!r}: expected FIELD=COLUMN$"):
            key_values([entry], "--map", "FIELD=COLUMN", **kw)


def test_flat_models_and_parse_set():
    assert _opts(Flat, ["--n", "4", "--set", "seed=9"]).model_dump() == {"n": 4, "seed": 9, "api_key": None}
    assert parse_set("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_set("x=not: yaml: here") == (["x"], "not: yaml: here")
    assert Flat.parse({"n": 1, "seed": None}).seed == 3  # None keeps the default of a field without None


def test_the_shared_sampling_and_pixel_policy_records_speak_the_one_error_format():
    """Issue 42: decoding and the pixel policy are one ``Options`` record each (``core.schema.Sampling``,
    ``core.images.PixelPolicy``), refused as ``WHERE.KEY: ... (got V)``; a teacher stage's ``max_tokens`` is the
    record's ``max_new_tokens``; a recipe's ``pixel_policy`` mapping (or its ``KEY=VALUE,...`` on the command line,
    through ``key_values``) builds the same policy, and the positional form training used is gone."""
    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.schema import Sampling as Decoding

    with pytest.raises(
        OptionError, match=r"^sampling\.top_p: Input should be less than or equal to 1 \(got 2\)$"
    ):
        Decoding.parse({"top_p": 2}, "sampling")
    assert Decoding.parse({"max_tokens": 512, "top_k": 0}).model_dump() == {
        "temperature": 1.0, "top_p": 0.95, "top_k": None, "max_new_tokens": 512, "seed": 0}  # fmt: skip
    with pytest.raises(
        OptionError, match=r"^backend\.pixel_policy\.mode: Input should be 'fixed', 'smart' or 'none'"
    ):
        PixelPolicy.parse({"mode": "square"}, "backend.pixel_policy")
    with pytest.raises(
        OptionError,
        match=r"^pixel_policy: fixed image size 50 is not a multiple of the patch factor 28 \(got \{'size': 50\}\)$",
    ):
        PixelPolicy.parse({"size": 50}, "pixel_policy")
    with pytest.raises(TypeError):
        PixelPolicy("fixed", 50)  # type: ignore[misc]
    recipe = {"mode": "smart", "size": 448, "min_pixels": None, "max_pixels": 10**5}
    assert PixelPolicy.parse(recipe) == PixelPolicy(mode="smart", max_pixels=10**5)  # None keeps the default
    flag = key_values(["size=64,factor=32"], "--pixel_policy")
    assert PixelPolicy.parse(flag, "pixel_policy") == PixelPolicy(size=64, factor=32)
    with pytest.raises(OptionError, match=r"^pixel_policy: need 0 < min_pixels <= max_pixels"):
        PixelPolicy.parse({"min_pixels": 10, "max_pixels": 5}, "pixel_policy")


def test_a_constraint_says_why_and_problem_is_the_one_line():
    """``Why`` metadata follows a constraint's message; ``problem`` is the one error line (value redacted)."""
    from perception_judge.core.options import Why, problem

    class Tau(Options):
        tau: Annotated[float, Field(gt=1), Why("no verdict is 'incorrect' at 1")] = 6.0
        plain: Annotated[float, Field(gt=1)] = 6.0

    with pytest.raises(
        OptionError,
        match=r"^x\.tau: Input should be greater than 1: no verdict is 'incorrect' at 1 \(got 1\); x\.plain: Input should be greater than 1 \(got 0\)$",
    ):
        Tau.parse({"tau": 1, "plain": 0}, "x")
    secret = problem("run.api_key", "refused", "sk-secret123456789")
    assert isinstance(secret, OptionError) and str(secret) == "run.api_key: refused (got '<redacted>')"
    assert str(problem("deepspeed", "not installed")) == "deepspeed: not installed"
