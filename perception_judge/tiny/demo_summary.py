"""The demo's learning summary (``runs/demo/summary.json``), learning-curve plot and first report section, from the
sweep's ``results.json`` (``perception`` and ``perception_mismatched``, pair protocol) and the trainer's log: every
accuracy with its 95% interval, n, tie and parse-failure rates and chance, beside the mismatched-image control.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHANCE = 0.5
TARGET = 0.85
TARGET_CI_LO = 0.75
CONTROL_MAX = 0.6
COMPARISONS = {"c_vs_rp": "pair_acc_c_vs_rp", "c_vs_rpr": "pair_acc_c_vs_rp_r"}


def _metric_block(metrics: dict[str, Any], name: str) -> dict[str, Any] | None:
    if metrics.get(name) is None:
        return None
    return {
        "accuracy": metrics[name],
        "ci95": [metrics.get(f"{name}_ci95_lo"), metrics.get(f"{name}_ci95_hi")],
        "ties": metrics.get(f"{name}_ties"),
        "parse_failures": metrics.get(f"{name}_parse_failures"),
        "n": int(metrics.get(f"{name}_n") or 0),
        "chance": CHANCE,
    }


def _blocks(real: dict[str, Any], mismatched: dict[str, Any]) -> dict[str, Any]:
    """The accuracy blocks of both comparisons on real images and on mismatched ones (``<key>_mismatched``)."""
    blocks = {key: _metric_block(real, metric) for key, metric in COMPARISONS.items()}
    return blocks | {f"{key}_mismatched": _metric_block(mismatched, m) for key, m in COMPARISONS.items()}


def _suite_metrics(rows: list[dict[str, Any]], model: str, suite: str) -> dict[str, Any]:
    return {r["metric"]: r["mean"] for r in rows if r["model"] == model and r["suite"] == suite}


def training_log(train_dir: Path) -> list[dict[str, Any]]:
    """The trainer's log history (``trainer_state.json`` of the run folder, else of its newest checkpoint)."""
    ckpts = sorted(
        train_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1])
    )
    for path in [train_dir / "trainer_state.json", *reversed(ckpts)]:
        if path.is_file():
            return list(json.loads(path.read_text()).get("log_history", []))
    return []


def build_summary(eval_dir: str | Path, train_dir: str | Path) -> dict[str, Any]:
    """The machine-readable summary (see the module docstring)."""
    eval_dir, train_dir = Path(eval_dir), Path(train_dir)
    results = json.loads((eval_dir / "results.json").read_text())
    rows = results.get("rows", [])
    models = []
    for m in results.get("models", []):
        real = _suite_metrics(rows, m["name"], "perception")
        control = _suite_metrics(rows, m["name"], "perception_mismatched")
        step = None if m.get("kind") == "base" else m.get("step")
        models.append({"name": m["name"], "step": step, "kind": m.get("kind"), **_blocks(real, control)})
    scored = [m for m in models if m["c_vs_rp"] is not None]
    best = max(scored, key=lambda m: (m["c_vs_rp"]["accuracy"], m["step"] or 0), default=None)
    trained = [m for m in scored if m["kind"] != "base"]
    last = max(trained, key=lambda m: (m["step"] or 0, m["kind"] == "final"), default=None)
    log = training_log(train_dir)
    curve = [
        {"step": e["step"], "reward": e.get("reward"), "judge_reward": e.get("rewards/judge/mean")}
        for e in log
        if "step" in e and "reward" in e
    ]
    summary: dict[str, Any] = {
        "models": models,
        "best": best["name"] if best else None,
        "last": last["name"] if last else None,
        "chance": CHANCE,
        "targets": {
            "last_c_vs_rp": TARGET,
            "last_c_vs_rpr": TARGET,
            "last_ci95_lo": TARGET_CI_LO,
            "last_mismatched_c_vs_rp_max": CONTROL_MAX,
        },
        "training_curve": curve,
    }
    if last is not None:
        checks = {
            key: bool(
                last[key] and last[key]["accuracy"] >= TARGET and (last[key]["ci95"][0] or 0) > TARGET_CI_LO
            )
            for key in COMPARISONS
        }
        control = last["c_vs_rp_mismatched"]
        checks["mismatched_control"] = bool(control and control["accuracy"] <= CONTROL_MAX)
        summary["last_checks"] = checks
        summary["learned"] = all(checks.values())
    return summary


def plot_learning_curve(summary: dict[str, Any], path: str | Path) -> Path | None:
    """Held-out pair accuracy (with the mismatched control and chance) and the mean training reward against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [m for m in summary["models"] if m["c_vs_rp"] is not None]
    if not points:
        return None
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [m["step"] or 0 for m in points]
    for key, label in (
        ("c_vs_rp", "r_c vs r_rp"),
        ("c_vs_rpr", "r_c vs r_rp+r"),
        ("c_vs_rp_mismatched", "r_c vs r_rp, mismatched images"),
    ):
        ys = [m[key]["accuracy"] if m[key] else None for m in points]
        lo = [m[key]["ci95"][0] if m[key] else None for m in points]
        hi = [m[key]["ci95"][1] if m[key] else None for m in points]
        ax.plot(steps, ys, marker="o", label=label)
        if all(v is not None for v in lo + hi):
            ax.fill_between(steps, lo, hi, alpha=0.15)
    ax.axhline(CHANCE, color="grey", linestyle="--", label="chance")
    ax.set_xlabel("GRPO step (0 = base model)")
    ax.set_ylabel("held-out pair accuracy (ties = 1/2)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("held-out accuracy, 95% intervals")
    curve = summary.get("training_curve") or []
    if curve:
        ax2.plot([c["step"] for c in curve], [c["reward"] for c in curve], label="total reward")
        if any(c.get("judge_reward") is not None for c in curve):
            ax2.plot([c["step"] for c in curve], [c.get("judge_reward") for c in curve], label="judge reward")
        ax2.set_xlabel("GRPO step")
        ax2.set_ylabel("mean reward of the sampled completions")
        ax2.legend(fontsize=8)
        ax2.set_title("training reward")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fmt_block(block: dict[str, Any] | None) -> str:
    """``0.942 [0.90, 0.96]``: an accuracy block with its 95% interval (``n/a`` when absent)."""
    if not block:
        return "n/a"
    lo, hi = block["ci95"]
    return f"{block['accuracy']:.3f} [{lo:.2f}, {hi:.2f}]"


def report_section(summary: dict[str, Any], plot: str | None) -> str:
    """The markdown section the demo puts at the top of the report."""
    lines = [
        "## Does the judge learn to look?",
        "",
        "Held-out pair accuracy on validation images the judge never trained on (both orders of every pair; a tie "
        f"counts 1/2, so chance is {CHANCE}), with 95% Wilson intervals. *Mismatched* scores the same requests with "
        "every image replaced by another record's: a judge that uses the image falls to chance there.",
        "",
        "| model | step | r_c vs r_rp | ties | parse fail | r_c vs r_rp+r | mismatched: r_c vs r_rp | n |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in summary["models"]:
        rp = m["c_vs_rp"] or {}
        lines.append(
            f"| {m['name']} | {'base' if m['step'] is None else m['step']} | {fmt_block(m['c_vs_rp'])} | "
            f"{(rp.get('ties') or 0):.3f} | {(rp.get('parse_failures') or 0):.3f} | {fmt_block(m['c_vs_rpr'])} | "
            f"{fmt_block(m['c_vs_rp_mismatched'])} | {rp.get('n', 0)} |"
        )
    lines.append("")
    if "learned" in summary:
        verdict = "yes" if summary["learned"] else "no"
        lines.append(
            f"Last checkpoint ({summary['last']}) meets the targets (>= {TARGET} with the interval above "
            f"{TARGET_CI_LO} on both comparisons, mismatched control <= {CONTROL_MAX}): **{verdict}** "
            f"({', '.join(f'{k} {v}' for k, v in summary['last_checks'].items())})."
        )
        lines.append("")
    sup = summary.get("supervised_upper_bound")
    if sup:
        lines += [
            f"Supervised upper bound (learnability check, {sup['steps']} supervised steps on the verdict target): "
            f"r_c vs r_rp {fmt_block(sup['c_vs_rp'])}, r_c vs r_rp+r {fmt_block(sup['c_vs_rpr'])}, mismatched images "
            f"{fmt_block(sup['c_vs_rp_mismatched'])}; passed: {sup['passed']}.",
            "",
        ]
    if plot:
        lines += [f"![learning curve]({plot})", ""]
    return "\n".join(lines) + "\n"


def write_demo_summary(out: str | Path) -> dict[str, Any] | None:
    """Write ``OUT/summary.json``, ``OUT/eval/plots/learning_curve.png`` and the report section; None when the
    sweep has not written its results yet."""
    out = Path(out)
    eval_dir = out / "eval"
    if not (eval_dir / "results.json").is_file():
        return None
    summary = build_summary(eval_dir, out / "train")
    learn = out / "learnability.json"
    if learn.is_file():
        r = json.loads(learn.read_text())
        summary["supervised_upper_bound"] = {
            "what": "supervised training on the PPJD verdict target (perception_judge.tiny.learnability), held-out tiny "
            "records of another seed, greedy",
            "steps": r["train"]["steps"],
            **_blocks(r["heldout"], r["mismatched"]),
            "passed": r["passed"],
        }
    if (out / "timings.json").is_file():  # each stage's wall and CPU seconds (perception_judge.tiny.demo)
        summary["timings"] = json.loads((out / "timings.json").read_text())
    plot = plot_learning_curve(summary, eval_dir / "plots" / "learning_curve.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    report = eval_dir / "report.md"
    if report.is_file():
        marker = "<!-- demo learning section -->"
        parts = report.read_text().split(marker)  # a re-run replaces its own section
        text = parts[0] if len(parts) == 1 else parts[0].rstrip("\n") + "\n" + parts[-1].lstrip("\n")
        section = (
            f"{marker}\n{report_section(summary, 'plots/learning_curve.png' if plot else None)}{marker}\n"
        )
        title, _, rest = text.partition("\n")
        report.write_text(f"{title}\n\n{section}{rest}" if title.startswith("# ") else section + text)
    return summary
