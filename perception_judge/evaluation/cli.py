"""``perception-judge eval``: evaluate judges, sweep a training run's checkpoints, render reports."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict

from perception_judge.core.command import Command
from perception_judge.core.io import PROGRESS, library_bars_off
from perception_judge.core.options import Flag, OptionError, Options, add_flags, given_flags, resolve_options
from perception_judge.core.redact import RedactingFilter, redact_text
from perception_judge.core.runinfo import read_run
from perception_judge.evaluation.plan import EvalPlan, JobConfig, RunJob, SweepJob, check_inputs, resolve
from perception_judge.evaluation.suites import SUITES

log = logging.getLogger("perception_judge.eval")

DESCRIPTION = """\
Evaluate multimodal judges. `eval sweep RUN_DIR` evaluates the base model and every checkpoint (full weights or
LoRA adapter) of a training run into RUN_DIR/eval/ (cells/, results.csv, results.json, report.md, report.json,
plots/); `eval run --model NAME=PATH ... --out DIR` compares any judges (local folders, adapters, an
OpenAI-compatible server, scripted judges). Re-running skips finished cells (model x suite x seed).

Suites: {suites} (`eval list` describes them).

Settings, lowest precedence first: the training run's file (sweep: pixel policy, think prefix, token budget,
training set), the eval job YAML (--config, e.g. eval/configs/tiny.yaml), --set KEY=VALUE (values are YAML; a
suite's option is SUITE.KEY: --set bias.n_per_type=8 --set perception.protocols=[pair]; also sampling.KEY and
backend.KEY), then the flags below. Everything is checked before any model loads. See docs/evaluation.md.
""".format(suites=", ".join(SUITES))


JOBS: dict[str, type[JobConfig]] = dict(sweep=SweepJob, run=RunJob)
"""The one options model of each command line that evaluates: the eval job with that command's own flags."""


class EvalFolder(Options):
    eval_dir: Annotated[Path, Flag("eval_dir")]
    """an evaluation folder with cells/ (a sweep's --out, RUN_DIR/eval)"""


class CollectOptions(EvalFolder):
    no_report: bool = False
    """write the tables only"""


class _Layer(Options):
    """A config file with ``--set`` applied, untyped: the plan merges the layers first, then types them once."""

    model_config = ConfigDict(extra="allow")


def _suite_key(item: str, job: type[JobConfig]) -> str:
    """A ``--set`` item with a suite's option (``SUITE.KEY=VALUE``) as the job key it sets (``options.SUITE.KEY``)."""
    key = item.partition("=")[0]
    head = key.split(".")[0].strip()
    if head in SUITES and "." in key:
        return f"options.{item.strip()}"
    if head in SUITES or head not in job.model_fields:
        raise OptionError(
            f"--set {item!r}: expected SUITE.KEY=VALUE with SUITE one of {', '.join(SUITES)} (or a key of the eval "
            f"job: {', '.join(job.model_fields)}); {head!r} is neither a suite nor a job key"
        )
    return item


def job_layers(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The command line's layers of the eval job, untyped: the config file (read once) with ``--set`` applied, and
    the flags given."""
    job = JOBS[args.action]
    config = resolve_options(_Layer, "", args.config, [_suite_key(s, job) for s in args.sets]).model_dump()
    flags: dict[str, Any] = {}
    for key, value in given_flags(job, args).items():
        *heads, last = key.split(".")
        target = flags
        for head in heads:
            target = target.setdefault(head, {})
        target[last] = value
    return config, flags


def plan_of(args: argparse.Namespace, check: bool = False) -> EvalPlan:
    """The :class:`~perception_judge.evaluation.plan.EvalPlan` of an ``eval sweep`` / ``eval run`` command line: the
    run file (sweep), then :func:`job_layers` (:func:`~perception_judge.evaluation.plan.resolve`: typed and checked
    once, before any model loads); ``check``: every path it names too (:func:`~.plan.check_inputs`)."""
    run = read_run(args.run_dir) if args.action == "sweep" else None
    plan = resolve(job_layers(args), run=run, job=JOBS[args.action])
    if check:
        check_inputs(plan, run)
    return plan


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
    run_help = (
        "Evaluate judges side by side into --out DIR (cells/, results.csv, results.json, report.md, plots/): "
        "each --model is one judge, the suites, seeds, sampling and backend are the same for all."
    )
    rn = sub.add_parser("run", help="evaluate and compare judges", description=run_help)
    for p, job in ((sw, SweepJob), (rn, RunJob)):
        add_flags(p, job)
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    co = sub.add_parser(
        "collect",
        help="after `eval sweep --claim` workers: write the tables and the report",
        description="Write results.csv / results.json and the report from the cell files of a sweep run by "
        "--claim workers; list the missing, failed and claimed cells. Exit code 0 when every cell is done, 1 "
        "while the sweep is incomplete. Re-running it on the same cells writes the same bytes.",
    )
    add_flags(co, CollectOptions)
    add_flags(sub.add_parser("report", help="re-render the report of an evaluation folder"), EvalFolder)
    add_flags(sub.add_parser("list", help="list suites and bias types"), Options)


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
    from perception_judge.evaluation.sweep import sweep

    plan = plan_of(args, check=True)
    job, out_dir = plan.job, plan.out_dir
    if job.ray:
        from perception_judge.evaluation.ray_workers import run_on_ray

        codes, state = run_on_ray(claim_worker, args, plan)
        print(
            f"ray: {len(codes)} workers, exit codes {sorted(codes)}; wrote {out_dir}/results.csv, results.json"
        )
        _print_collect_state(state)
        return 1 if any(codes) or state["missing"] or state["failed"] else 0
    claims = {"claim": job.claim, "lease_s": job.lease, "max_attempts": job.max_attempts}
    outcome, _ = sweep(args.run_dir, plan, report=not plan.job.no_report, progress=not args.quiet, **claims)
    if job.claim:
        print(
            f"cells: {outcome.done} run by this worker, {outcome.skipped} already done, {outcome.elsewhere} held by "
            f"other workers, {outcome.failed} failed; `perception-judge eval collect {out_dir}` writes the tables"
        )
    else:
        _print_outcome(outcome, out_dir, not plan.job.no_report)
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

    o = resolve_options(CollectOptions, "", args.config, args.sets, given_flags(CollectOptions, args))
    _, state = collect(o.eval_dir, report=not o.no_report)
    _print_collect_state(state)
    print(f"wrote {o.eval_dir}/results.csv, results.json" + ("" if o.no_report else ", report.md"))
    return 1 if state["missing"] or state["failed"] else 0


def run_eval(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.sweep import evaluate

    plan = plan_of(args, check=True)
    outcome, _ = evaluate(list(plan.models), plan, report=not plan.job.no_report, progress=not args.quiet)
    _print_outcome(outcome, plan.out_dir, not plan.job.no_report)
    return 1 if outcome.failed else 0


def run_report(args: argparse.Namespace) -> int:
    from perception_judge.evaluation.report import write_report
    from perception_judge.evaluation.results import CELLS_DIR, write_results

    eval_dir = resolve_options(EvalFolder, "", args.config, args.sets, given_flags(EvalFolder, args)).eval_dir
    if not (eval_dir / CELLS_DIR).is_dir():
        raise FileNotFoundError(f"{str(eval_dir)!r} has no cells/ folder: not an evaluation folder")
    if not (eval_dir / "results.json").is_file():
        write_results(eval_dir)
    rep = write_report(eval_dir)
    print(f"wrote {eval_dir}/report.md, report.json and {len(rep['plots'])} plot(s)")
    if rep["summary"].get("best"):
        print(f"best model: {rep['summary']['best']}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    resolve_options(Options, "", args.config, args.sets)  # a --config or --set names no option of its own
    print("suites (options: --set SUITE.KEY=VALUE; headline metrics first; what some metrics measure):")
    for name, suite in SUITES.items():
        print(f"  {name:22s} {', '.join(suite.primary[:3])}")
        print(f"  {'':22s} options: {', '.join(suite.options.model_fields)}")
        for metric in (k for k, m in suite.metrics.items() if m.about):
            print(f"  {'':22s} {metric:26s} {suite.metrics[metric].about}")
    return 0


def _quiet() -> None:
    """Progress bars off and library warnings only, without importing transformers / datasets (fast)."""
    PROGRESS["enabled"] = False
    library_bars_off()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "transformers" in sys.modules:  # already imported (in-process callers): tell it directly
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()


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
    action = dict(sweep=run_sweep, run=run_eval, collect=run_collect, report=run_report, list=run_list)
    return action[args.action](args)  # an input error is one line from the entry point (perception_judge.cli)


COMMAND = Command(add_arguments=add_arguments, run=run, description=DESCRIPTION)
