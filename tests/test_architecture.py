"""The layout docs/architecture.md describes: no import cycle, the core imports nothing of the stages, the parts
(the command-line modules included: a stage's CLI is part of its stage) stand on at most four levels of imports,
nothing imports the entry point (``perception_judge.cli``), no production module imports the toy wing
(``perception_judge.tiny``), no arrow runs back up inside the evaluation, one class each for sampling and the pixel
policy, every subcommand takes ``--config`` and ``--set``, and no module reads a file of the checkout."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "perception_judge"
PRODUCTION = ("core", "synth", "rewards", "llm_client", "ppjd", "train", "evaluation")
QWEN_SCAFFOLDING = (
    "perception_judge.tiny",
    "perception_judge.tiny.qwen_vocab",
    "perception_judge.tiny.qwen_vl",
)
MAX_LEVELS = 4


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every project module each module imports (at the top or inside a function)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _is_root(module: str) -> bool:
    """The package itself (``__init__``: the version and the docstring), which every part may read."""
    return module == "perception_judge"


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                return [*stack[stack.index(w) :], w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        stack.pop()
        return None

    for v in sorted(edges):
        if v not in state and (found := visit(v)):
            return found
    return None


@pytest.fixture(scope="module")
def graph():
    modules = _modules()
    return modules, _imports(modules)


def test_no_import_cycle(graph):
    _, edges = graph
    assert _cycle(edges) is None, f"import cycle: {' -> '.join(_cycle(edges) or [])}"


def test_the_core_imports_nothing_of_the_stages(graph):
    _, edges = graph
    for module, targets in edges.items():
        if module.startswith("perception_judge.core"):
            outside = sorted(t for t in targets if not t.startswith("perception_judge.core"))
            assert not outside, f"{module} imports {outside}"


def test_the_parts_stand_on_at_most_four_levels(graph):
    _, edges = graph
    parts: dict[str, set[str]] = defaultdict(set)
    for module, targets in edges.items():
        if _is_root(module):
            continue
        parts[_part(module)] |= {_part(t) for t in targets if not _is_root(t) and _part(t) != _part(module)}
    assert _cycle(parts) is None, f"cycle between parts: {_cycle(parts)}"
    depth: dict[str, int] = {}

    def level(p: str) -> int:
        if p not in depth:
            depth[p] = 1 + max((level(q) for q in parts.get(p, ())), default=0)
        return depth[p]

    levels = {p: level(p) for p in parts}
    assert max(levels.values()) <= MAX_LEVELS, levels
    assert levels["perception_judge.core"] == 1 and levels["perception_judge.tiny"] == MAX_LEVELS, levels
    assert levels["perception_judge.cli"] == 2, (
        "the entry point names its commands by module path, imports the core"
    )


def test_nothing_imports_the_entry_point(graph):
    """``perception_judge.cli`` stands on top: a stage's command is a ``core.command.Command`` record."""
    _, edges = graph
    found = sorted(m for m, targets in edges.items() if "perception_judge.cli" in targets)
    assert not found, found
    assert "perception_judge.core.command" in edges["perception_judge.ppjd.cli"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_tiny_scaffolding_imports_only_the_core(graph):
    """Qwen's tokenizer and templates (``perception_judge.tiny``, ``tiny.qwen_vocab``, ``tiny.qwen_vl``) stand on the
    core alone."""
    _, edges = graph
    for module in QWEN_SCAFFOLDING:
        outside = sorted(
            t
            for t in edges[module]
            if not t.startswith("perception_judge.core") and t not in QWEN_SCAFFOLDING
        )
        assert not outside, f"{module} imports {outside}"


def test_production_modules_do_not_import_the_toy_wing(graph):
    """The toy wing (``perception_judge.tiny``: tiny models, their supervised runs, toy sets, fixtures, the
    learnability check, the demo) stands above the stages; nothing of the production code imports it (a recipe names
    its model provider by a dotted path, and the top-level ``cli`` registers its commands by name)."""
    _, edges = graph
    production = tuple(f"perception_judge.{part}" for part in PRODUCTION)
    found = {
        module: sorted(
            t for t in targets if t == "perception_judge.tiny" or t.startswith("perception_judge.tiny.")
        )
        for module, targets in edges.items()
        if module in production or module.startswith(tuple(f"{p}." for p in production))
    }
    assert not {m: t for m, t in found.items() if t}, found
    assert "perception_judge.train.models" in found and "perception_judge.evaluation.base" in found


def test_every_data_file_of_the_package_is_package_data():
    """A file the package reads at run time (templates, JSON, YAML) must match pyproject's package-data globs, or an
    installed (non-editable) package would lack it."""
    import tomllib
    from fnmatch import fnmatch

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["perception_judge"]
    data = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert "tiny/templates/qwen3_vl_thinking.jinja" in data
    missing = [f for f in data if not any(fnmatch(f, g) or fnmatch(f, g.removeprefix("**/")) for g in globs)]
    assert not missing, f"not covered by package-data {globs}: {missing}"


def test_no_module_reads_a_file_above_its_folder():
    """The demo runs from an installed package, outside the checkout (``tests/test_demo.py::
    test_demo_runs_from_an_installed_package_outside_the_checkout``, slow): a file a module reads lies beside it
    (``Path(__file__).with_name``, ``importlib.resources``) and is package data (above), never up in the checkout
    (``Path(__file__).parents[2] / "recipes"``, the demo's ``ROOT`` before issue 42)."""

    def climbs(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "parents") or (
            isinstance(node, ast.Attribute)
            and node.attr == "parent"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "parent"
        )

    found = {
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if climbs(node) and "__file__" in ast.unparse(node)
    }
    assert not found, found


MAX_FUNCTION_LINES = 80


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_is_longer_than_80_lines():
    """Long functions built from closures were the hardest code to follow: every function (its decorators aside,
    its docstring included) fits in 80 lines."""
    found = {
        str(path.relative_to(PACKAGE)): long
        for path in sorted(PACKAGE.rglob("*.py"))
        if (long := _long_functions(path.read_text(encoding="utf-8"), MAX_FUNCTION_LINES))
    }
    assert not found, found
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"def f():\n{body}\n", MAX_FUNCTION_LINES) == [("f", MAX_FUNCTION_LINES + 1)]


def _subcommand_parsers() -> dict[str, argparse.ArgumentParser | None]:
    """Every subcommand, and every action of a subcommand with actions (``eval sweep``), listed from the parsers;
    None for one with a parser of its own (``train``)."""
    from perception_judge.cli import COMMANDS, build_parser
    from perception_judge.core.command import Command

    found: dict[str, argparse.ArgumentParser | None] = {}
    for name, (target, _) in COMMANDS.items():
        module, attr = target.split(":")
        command = getattr(importlib.import_module(module), attr)
        parser = build_parser(name, command) if isinstance(command, Command) else None
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)] if parser else []
        for sub in actions:
            found |= {f"{name} {action}": p for action, p in sub.choices.items()}
        if not actions:
            found[name] = parser
    return found


def _own_help(name: str) -> str:
    """The --help page of a job with a parser of its own (``train``: trl's, the recipe's)."""
    import contextlib
    import io

    from perception_judge.cli import COMMANDS

    module, attr = COMMANDS[name][0].split(":")
    with contextlib.redirect_stdout(out := io.StringIO()), pytest.raises(SystemExit):
        getattr(importlib.import_module(module), attr)(["--help"])
    return out.getvalue()


def test_every_subcommand_takes_config_and_set():
    """One configuration door: each subcommand's (and each eval action's) --help has --config FILE and
    --set KEY=VALUE (``core.options.add_flags``; the training recipe's parser adds its own)."""
    helps = {name: p.format_help() if p else _own_help(name) for name, p in _subcommand_parsers().items()}
    assert {"synth", "demo", "learnability", "chat-template", "make-tiny-model", "train", "merge-lora",
            "recipe-memory", "eval sweep", "eval run", "eval collect", "eval report", "eval list"} <= set(helps)  # fmt: skip
    without = sorted(
        name for name, text in helps.items() if "--config FILE" not in text or "--set KEY=VALUE" not in text
    )
    assert not without, f"without --config/--set: {without}"


EVALUATION = "perception_judge.evaluation"
SUITE_FAMILIES = tuple(f"{EVALUATION}.{family}" for family in ("perception", "bias", "benchmarks"))
"""The suites' homes: each family's modules are its suites and their own helpers."""


def _family(module: str) -> str | None:
    return next((f for f in SUITE_FAMILIES if module == f or module.startswith(f + ".")), None)


def _defines_a_suite(path: Path) -> bool:
    """Whether a module assigns ``SUITE`` (its record) at the top: a suite module, wherever it lives."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(
        isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "SUITE" for t in n.targets) for n in body
    )


def test_no_arrow_runs_back_up_inside_evaluation(graph):
    """Issue 42: general statistics lived inside particular suites (the preference benchmarks imported perception's
    Wilson interval, perception the benchmarks' rate and the bias suite's mean/std, the results table the bias
    metrics). Now a suite module (one the registry ``evaluation.suites`` lists) is imported by the registry alone,
    so no suite module imports another's; the statistics (``evaluation.stats``) import nothing of the evaluation;
    and the modules outside the suites' homes (the judge loop, the backends, plan, sweep, results, report) import
    none of their modules but through the registry."""
    modules, edges = graph
    registry = f"{EVALUATION}.suites"
    suites = {t for t in edges[registry] if _defines_a_suite(modules[t])}
    expected = {"perception", "bias.suite", "benchmarks.mllm_judge", "benchmarks.self_enhancement"}
    assert {f"{EVALUATION}.{s}" for s in expected} <= suites
    found = []
    for module, targets in edges.items():
        if module.startswith(f"{EVALUATION}.") and module != registry:
            found += [f"{module} -> {t} (a suite module)" for t in targets if t in suites]
            found += [f"{module} -> {t}" for t in targets if _family(t) and not _family(module)]
    assert not found, found
    assert not {t for t in edges[f"{EVALUATION}.stats"] if t.startswith(f"{EVALUATION}.")}


def test_the_report_asks_the_suite_records(graph):
    """Issue 42: the report read bias internals (``bias.taxonomy.BIASES``, ``if suite == "bias"`` twice); now its
    tables' labels, notes and bar plots come from the suite records (``Metric.label``, ``Suite.note``,
    ``Suite.bars``), and it names no suite."""
    from perception_judge.evaluation.suites import SUITES

    modules, edges = graph
    for module in (f"{EVALUATION}.report", f"{EVALUATION}.cli"):
        assert not [t for t in edges[module] if _family(t) or _defines_a_suite(modules[t])], module
        names = {f.rsplit(".", 1)[-1] for f in SUITE_FAMILIES} | set(SUITES)
        tree = ast.parse(modules[module].read_text(encoding="utf-8"))
        said = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not said & names, (module, said & names)


def test_one_class_for_sampling_and_one_for_the_pixel_policy(graph):
    """Issue 42: sampling had four shapes (``Sampling``, ``SamplingOptions``, ``StageSampling``, trl's fields) and the
    pixel policy three (``PixelPolicy``, ``PixelOptions``, the recipe's flat keys), each with its own errors. Now one
    typed class each in the core, which the eval job, the backends, the teacher stages and the run file use."""
    import re

    from perception_judge.core.images import PixelPolicy
    from perception_judge.core.runinfo import RunInfo
    from perception_judge.core.schema import Sampling
    from perception_judge.evaluation.backends import BackendSpec
    from perception_judge.evaluation.plan import BackendOptions, JobConfig
    from perception_judge.ppjd.options import Stages

    modules, _ = graph
    shape = re.compile(r"\w*(Sampling\w*|Pixel\w*(Options|Policy))")
    classes = {
        (name, node.name)
        for name, path in modules.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and shape.fullmatch(node.name)
    }
    assert classes == {
        ("perception_judge.core.schema", "Sampling"),
        ("perception_judge.core.images", "PixelPolicy"),
    }
    assert JobConfig.model_fields["sampling"].annotation is Sampling
    assert {f.annotation for f in Stages.model_fields.values()} == {Sampling}
    assert BackendOptions.model_fields["pixel_policy"].annotation == PixelPolicy | None
    hints = {f.name: f.type for f in dataclasses.fields(BackendSpec)} | {
        f"run.{f.name}": f.type for f in dataclasses.fields(RunInfo)
    }
    assert (hints["sampling"], hints["pixel_policy"], hints["run.pixel_policy"]) == (
        "Sampling",
        "PixelPolicy",
        "PixelPolicy",
    )
