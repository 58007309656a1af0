"""``perception-judge eval``: evaluate judges, sweep a training run's checkpoints, render reports."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from perception_judge.core.command import Command
from perception_judge.core.options import Flag, OptionError, Options, add_flags, given_flags, resolve_options
from perception_judge.core.redact import RedactingFilter, redact_text
from perception_judge.evaluation.plan import JobConfig, Names, resolve
from perception_judge.evaluation.suites import SUITES

log = logging.getLogger("perception_judge.eval")

DESCRIPTION = """\
Evaluate multimodal judges. `eval sweep RUN_DIR` evaluates the base model and every checkpoint (full weights or
LoRA adapter) of a training run into RUN_DIR/eval/ (cells/, results.csv, results.json, report.md, report.json,
plots/); `eval run --model NAME=PATH ... --out DIR` compares any judges (local folders, adapters, an
OpenAI-compatible server, scripted judges). Re-running skips finished cells (model x suite x seed).

Suites: bias (MM-JudgeBias compositional biases), perception (held-out PPJD: r_c vs its counterfactuals), and
the judge benchmarks (mllm_judge, vlrewardbench, mjbench, multimodal_rewardbench, mmrb2, position, verbosity, self_enhancement); `eval list`.

Settings, lowest precedence first: the training run's file (sweep: pixel policy, think prefix, token budget,
training set), the eval job YAML (--config, e.g. eval/configs/tiny.yaml), --set KEY=VALUE (values are YAML; a
suite's option is SUITE.KEY: --set bias.n_per_type=8 --set perception.protocols=[pair]; also sampling.KEY and
backend.KEY), then the flags below. Everything is checked before any model loads. See docs/evaluation.md.
"""


class CommonFlags(Options):
    out: Path | None = None
    """output folder"""
    force: bool = False
    """re-run finished cells too"""
    no_report: bool = False
    """write the results table but no report"""


class SweepFlags(CommonFlags):
    models: Names | None = None
    """only these models (shell patterns: base,checkpoint-*,final)"""
    claim: bool = False
    """one of many identical workers on this sweep (a SLURM array, srun tasks, Ray tasks): run only the cells this
    worker claims (exclusive-create claim files with a heartbeat lease); write no tables (`eval collect OUT` does,
    once every cell is done)"""
    lease: float = 60.0
    """--claim: seconds before a silent worker's cell is taken over"""
    max_attempts: int = 3
    """--claim: a cell that failed this often is left failed"""
    ray: Annotated[int | None, Flag(metavar="N")] = None
    """run N --claim workers as Ray tasks (pip install 'perception-judge[ray]'), then collect"""
    ray_gpus: float | None = None
    """--ray: GPUs per worker (default 1 when the cluster has GPUs, else 0)"""
    ray_address: str | None = None
    """--ray: a running cluster (auto inside one; default: start a local cluster)"""


class RunFlags(CommonFlags):
    model: Annotated[list[str], Flag(metavar="[NAME=]TARGET")] = Field(default_factory=list)
    """a judge to evaluate (repeatable): a model or adapter folder (hf, vllm; an adapter is loaded on the base its
    config names), a served model name (openai), a scripted judge (constant, random, module:function)"""
    adapter: str | None = None
    """LoRA adapter for a single --model"""
    base_model: str | None = None
    """base model of adapter folders whose config names another path"""


def _flags(args: argparse.Namespace) -> Any:
    """The action's own flags, typed."""
    model = {"sweep": SweepFlags, "run": RunFlags}[args.action]
    return model.parse(given_flags(model, args))


def _suite_key(item: str) -> str:
    """A ``--set`` item with a suite's option (``SUITE.KEY=VALUE``) as the job key it sets (``options.SUITE.KEY``)."""
    key = item.partition("=")[0]
    head = key.split(".")[0].strip()
    if head in SUITES and "." in key:
        return f"options.{item.strip()}"
    if head in SUITES or head not in JobConfig.model_fields:
        raise OptionError(
            f"--set {item!r}: expected SUITE.KEY=VALUE with SUITE one of {', '.join(SUITES)} (or a key of the eval "
            f"job: {', '.join(JobConfig.model_fields)}); {head!r} is neither a suite nor a job key"
        )
    return item


def job_layers(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The eval job's checked layers from the command line: the config file with ``--set`` applied, and the flags."""
    config = resolve_options(JobConfig, "", args.config, [_suite_key(s) for s in args.sets])
    flags: dict[str, Any] = {}
    for key, value in given_flags(JobConfig, args).items():
        *heads, last = key.split(".")
        target = flags
        for head in heads:
            target = target.setdefault(head, {})
        target[last] = value
    return config.model_dump(exclude_unset=True), flags


def build_plan(args: argparse.Namespace, run: Any = None) -> Any:
    """The :class:`~perception_judge.evaluation.plan.EvalPlan` of the run file (``eval sweep``), the job config with
    ``--set``, and the flags, in that order (:func:`~perception_judge.evaluation.plan.resolve`: everything typed and
    checked before any model loads)."""
    config, flags = job_layers(args)
    own = _flags(args)
    out = own.out or config.get("out") or (run.run_dir / "eval" if run is not None else None)
    if out is None:
        raise ValueError("eval run needs --out DIR (or out: in the config)")
    return resolve([config, flags], Path(out), run, force=own.force)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sweep_help = (
        "Evaluate the base model, every checkpoint and the final model of a training run (RUN_DIR/"
        "perception_judge_run.json names the base model, tuning, pixel policy, think prefix, token budget and "
        "training set). Finished cells are skipped on re-runs."
    )
    sw = sub.add_parser("sweep", help="evaluate every checkpoint of a training run", description=sweep_help)
    sw.add_argument("run_dir", type=Path, help="training output folder (train_grpo.py --output_dir)")
    rn = sub.add_parser(
        "run", help="evaluate and compare judges", description=RunFlags.model_fields["model"].description
    )
    for p, flags in ((sw, SweepFlags), (rn, RunFlags)):
        add_flags(p, flags, config=False)
        add_flags(p, JobConfig)
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    co = sub.add_parser(
        "collect",
        help="after `eval sweep --claim` workers: write the tables and the report",
        description="Write results.csv / results.json and the report from the cell files of a sweep run by "
        "--claim workers; list the missing, failed and claimed cells. Exit code 0 when every cell is done, 1 "
        "while the sweep is incomplete. Re-running it on the same cells writes the same bytes.",
    )
    co.add_argument("eval_dir", type=Path, help="the sweep's --out folder")
    co.add_argument("--no-report", action="store_true", help="write the tables only")
    rp = sub.add_parser("report", help="re-render the report of an evaluation folder")
    rp.add_argument("eval_dir", type=Path, help="a folder with results.json (a sweep's RUN_DIR/eval)")
    sub.add_parser("list", help="list suites and bias types")


def _print_outcome(outcome: Any, out_dir: Path, report: bool) -> None:
    print(
        f"cells: {outcome.done} run, {outcome.skipped} already done (skipped), {outcome.failed} failed"
        f" -> {out_dir}/results.csv, results.json" + (", report.md, plots/" if report else "")
    )
    for c in outcome.cells:
        if c.get("status") == "failed":
            print(f"  FAILED {c['cell']}: {redact_text(str(c.get('error')))}", file=sys.stderr)
    path = out_dir / "report.json"
    s = json.loads(path.read_text()).get("summary", {}) if path.is_file() else {}
    if s.get("best") and s.get("all_tied"):
        print(f"no model stands out: all tie on every primary metric (tie-break pick: {s['best']})")
    elif s.get("best"):
        print(f"best model: {s['best']}  ({s.get('criterion')})")


def run_sweep(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.sweep import read_run, sweep

    run, f = read_run(args.run_dir), _flags(args)
    plan = build_plan(args, run)
    out_dir = plan.out_dir
    if f.ray:
        from perception_judge.evaluation.ray_workers import run_on_ray

        args.out_dir = out_dir
        codes, state = run_on_ray(claim_worker, args, f.ray, f.ray_gpus, f.ray_address)
        print(
            f"ray: {len(codes)} workers, exit codes {sorted(codes)}; wrote {out_dir}/results.csv, results.json"
        )
        _print_collect_state(state)
        return 1 if any(codes) or state["missing"] or state["failed"] else 0
    models = f.models or job_layers(args)[0].get("models_filter")
    claims = {"claim": f.claim, "lease_s": f.lease, "max_attempts": f.max_attempts}
    outcome, _ = sweep(run.run_dir, plan, models, report=not f.no_report, progress=not args.quiet, **claims)
    if f.claim:
        print(
            f"cells: {outcome.done} run by this worker, {outcome.skipped} already done, {outcome.elsewhere} held by "
            f"other workers, {outcome.failed} failed; `perception-judge eval collect {out_dir}` writes the tables"
        )
    else:
        _print_outcome(outcome, out_dir, not f.no_report)
    return 1 if outcome.failed else 0


def claim_worker(args: argparse.Namespace) -> int:
    """One ``eval sweep --claim`` worker (the SLURM task's and the Ray task's function); returns its exit code."""
    return run(argparse.Namespace(**{**vars(args), "claim": True, "ray": None}))


def _print_collect_state(state: dict[str, list[str]]) -> None:
    for what, cells in state.items():  # missing, failed, claimed
        if cells:
            shown = ", ".join(cells[:10]) + (" ..." if len(cells) > 10 else "")
            print(f"{len(cells)} cell(s) {what}: {shown}", file=sys.stderr)


def run_collect(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.sweep import collect

    _, state = collect(args.eval_dir, report=not args.no_report)
    _print_collect_state(state)
    print(f"wrote {args.eval_dir}/results.csv, results.json" + ("" if args.no_report else ", report.md"))
    return 1 if state["missing"] or state["failed"] else 0


def _model_entries(f: RunFlags, models: list[dict[str, Any]], kind: str) -> list[Any]:
    from perception_judge.evaluation.sweep import ModelEntry

    entries = []
    for i, m in enumerate(models):
        if not isinstance(m, dict) or not (m.get("model") or m.get("fn")):
            raise ValueError(
                f"config models[{i}] must be a mapping with 'model' (and optional name, adapter, step)"
            )
        name = str(m.get("name") or Path(str(m.get("model") or m.get("fn"))).name)
        spec = {k: v for k, v in m.items() if k not in ("name", "step")}
        entries.append(ModelEntry(name, m.get("step"), "model", spec))
    for item in f.model:
        name, sep, target = item.partition("=")
        if not sep:
            name, target = Path(item.rstrip("/")).name or item, item
        key = "fn" if kind == "scripted" else "model"
        spec = {key: target, "adapter": f.adapter, "base_model": f.base_model}
        entries.append(ModelEntry(name, None, "model", {k: v for k, v in spec.items() if v}))
    if f.adapter and len(f.model) != 1:
        raise ValueError("--adapter applies to exactly one --model")
    if dupes := sorted(n for n, k in Counter(e.name for e in entries).items() if k > 1):
        raise ValueError(f"duplicate model names {dupes}: name them with --model NAME=TARGET")
    if not entries:
        raise ValueError("no model to evaluate: pass --model [NAME=]TARGET (or models: in --config)")
    return entries


def run_eval(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.sweep import check_cell_names, evaluate

    plan, f = build_plan(args), _flags(args)
    entries = _model_entries(f, job_layers(args)[0].get("models") or [], plan.backend.kind)
    check_cell_names(entries)
    outcome, _ = evaluate(entries, plan, report=not f.no_report, progress=not args.quiet)
    _print_outcome(outcome, plan.out_dir, not f.no_report)
    return 1 if outcome.failed else 0


def run_report(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.report import write_report
    from perception_judge.evaluation.results import CELLS_DIR, write_results

    if not (args.eval_dir / CELLS_DIR).is_dir():
        raise FileNotFoundError(f"{str(args.eval_dir)!r} has no cells/ folder: not an evaluation folder")
    if not (args.eval_dir / "results.json").is_file():
        write_results(args.eval_dir)
    rep = write_report(args.eval_dir)
    print(f"wrote {args.eval_dir}/report.md, report.json and {len(rep['plots'])} plot(s)")
    if rep["summary"].get("best"):
        print(f"best model: {rep['summary']['best']}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.bias.taxonomy import BIASES

    print("suites (options: --set SUITE.KEY=VALUE; headline metrics first):")
    for name, suite in SUITES.items():
        print(f"  {name:22s} {', '.join(suite.primary[:3])}")
        print(f"  {'':22s} options: {', '.join(suite.options.model_fields)}")
    print("bias types (MM-JudgeBias):")
    for b in BIASES:
        print(f"  {b.bias_type:26s} {b.category:12s} {b.metric.upper()}  {b.perturbation}")
    return 0


def _quiet() -> None:
    """Progress bars off and library warnings only, without importing transformers / datasets (fast)."""
    from perception_judge.evaluation.base import set_progress

    set_progress(False)
    for var, value in (("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                       ("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")):  # fmt: skip
        os.environ.setdefault(var, value)
    if "transformers" in sys.modules:  # already imported (in-process callers): tell it directly
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    if "datasets" in sys.modules:
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()


def run(args: argparse.Namespace) -> int:
    quiet = getattr(args, "quiet", False)
    if quiet:
        _quiet()
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:  # no URL credentials on the terminal either
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    try:
        action = dict(sweep=run_sweep, run=run_eval, collect=run_collect, report=run_report, list=run_list)
        return action[args.action](args)
    except (FileNotFoundError, KeyError, ValueError, ImportError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"perception-judge eval {args.action}: error: {redact_text(str(msg))}", file=sys.stderr)
        return 2


COMMAND = Command(add_arguments=add_arguments, run=run, description=DESCRIPTION)
