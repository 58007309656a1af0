"""Counterfactuals of synthetic items, correct by construction: the programmatic teacher's logic, shared by the PPJD
builder, the tiny models and the bias suite. r_rp re-renders r_c's template with one perceptual fact misread
(:func:`~perception_judge.synth.world.perturb`), r_rp+r also makes a reasoning slip; both answers differ from the
ground truth and from each other. Randomness is seeded per record key (independent of concurrency and resuming).
"""

from __future__ import annotations

import random
from typing import Any

from perception_judge.core.answers import answers_match
from perception_judge.core.schema import Counterfactuals, StageError
from perception_judge.synth.base import Unsolvable
from perception_judge.synth.world import facts, perturb, slips, solve

MAX_TRIES = 64
MIN_FACTS = 3


def _changed_facts(spec: dict[str, Any], attrs: dict[str, Any]) -> list[str]:
    return [f"{a} -> {b}" for a, b in zip(facts(spec), facts(spec, attrs)) if a != b]


def _solve(
    spec: dict[str, Any], attrs: dict[str, Any], slip: dict[str, Any] | None = None
) -> tuple[str, str] | None:
    try:
        return solve(spec, attrs, slip)
    except Unsolvable:
        return None


def counterfactuals(
    spec: dict[str, Any], response: str, answer: str, key: str, seed: int = 0, item_id: str = ""
) -> Counterfactuals:
    """r_rp and r_rp+r of one synthetic item (its spec, r_c and ground-truth answer); raises the PPJD
    :class:`~perception_judge.core.schema.StageError` of the failing stage (verify / attributes / rewrite)."""
    if not spec or not {"family", "qtype", "attributes"} <= spec.keys():
        raise StageError(
            "verify",
            "no_spec",
            f"item {item_id or key!r} has no synthetic scene spec; the programmatic teacher only handles "
            "`perception-judge synth` items (use --teacher llm for other sources)",
        )
    if (kinds := slips(spec)) is None:
        raise StageError("verify", "unknown_qtype", f"no solver for {(spec['family'], spec['qtype'])}")
    try:
        r_c, solved = solve(spec)
    except (Unsolvable, KeyError, TypeError, ValueError) as e:
        raise StageError("verify", "rc_mismatch", f"the spec does not solve: {e}") from None
    if r_c != response or not answers_match(solved, answer):
        raise StageError(
            "verify", "rc_mismatch", "r_c or the answer differs from what the scene spec renders"
        )
    spec_facts = list(spec.get("facts") or [])
    if len(spec_facts) < MIN_FACTS:
        raise StageError("attributes", "too_few_attributes", f"{len(spec_facts)} facts in the spec")

    rng = random.Random(f"ppjd/programmatic/{seed}/{key}")
    for _ in range(MAX_TRIES):
        perceived = perturb(spec, spec["attributes"], rng)
        solved_rp = _solve(spec, perceived)
        if solved_rp is not None and not answers_match(solved_rp[1], answer):
            r_rp, a_rp = solved_rp
            break
    else:
        raise StageError("rewrite", "no_perturbation", "no misread fact changes the answer")

    for _ in range(MAX_TRIES):
        attrs = perceived if rng.random() < 0.5 else perturb(spec, spec["attributes"], rng)
        if attrs == spec["attributes"]:
            continue
        slip = {"kind": rng.choice(kinds), "delta": rng.choice((-2, -1, 1, 2))}
        solved_r = _solve(spec, attrs, slip)
        if solved_r is None or answers_match(solved_r[1], answer) or answers_match(solved_r[1], a_rp):
            continue
        plain = _solve(spec, attrs)  # the perceptual error must show in the text, not only the reasoning slip
        if solved_r[0] != r_rp and plain is not None and plain[0] != r_c:
            break
    else:
        raise StageError("rewrite", "no_reasoning_slip", "no slip gives a third distinct answer")
    meta = {
        "perturbed_rp": _changed_facts(spec, perceived),
        "perturbed_rp_r": _changed_facts(spec, attrs),
        "slip": slip["kind"],
    }
    return Counterfactuals(r_rp=r_rp, r_rp_r=solved_r[0], attributes=spec_facts[:6], meta=meta)
