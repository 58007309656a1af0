"""Counterfactuals of synthetic items, correct by construction: the programmatic teacher's logic, owned by the
synthetic world so that the PPJD builder, the tiny models and the bias suite share it.

For an item's scene spec, r_rp re-renders r_c's template from the attributes with one perceptual fact misread
(:func:`~perception_judge.synth.world.perturb`), so only that fact and what follows from it change; r_rp+r
misreads a fact *and* makes a reasoning slip. Both answers differ from the ground truth and from each other.
Randomness is seeded per record key, so results depend neither on concurrency nor on resuming.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from perception_judge.core.answers import answers_match
from perception_judge.synth.world import FACTS, SLIPS, SOLVERS, Unsolvable, perturb, solve

MAX_TRIES = 64
MIN_FACTS = 3


class NoCounterfactual(ValueError):
    """The spec gives no valid counterfactual; ``stage`` / ``reason`` are the PPJD failure's."""

    def __init__(self, stage: str, reason: str, detail: str) -> None:
        super().__init__(f"{stage}/{reason}: {detail}")
        self.stage, self.reason, self.detail = stage, reason, detail


@dataclass
class Counterfactual:
    r_rp: str
    r_rp_r: str
    facts: list[str]
    meta: dict[str, Any] = field(default_factory=dict)


def _changed_facts(spec: dict[str, Any], attrs: dict[str, Any]) -> list[str]:
    before = FACTS[spec["family"]](spec["attributes"])
    after = FACTS[spec["family"]](attrs)
    return [f"{a} -> {b}" for a, b in zip(before, after) if a != b]


def counterfactuals(
    spec: dict[str, Any], response: str, answer: str, key: str, seed: int = 0, item_id: str = ""
) -> Counterfactual:
    """r_rp and r_rp+r of one synthetic item (its spec, r_c and ground-truth answer); raises
    :class:`NoCounterfactual` with the failing stage (verify / attributes / rewrite) and reason."""
    if not spec or "family" not in spec or "qtype" not in spec or "attributes" not in spec:
        raise NoCounterfactual(
            "verify",
            "no_spec",
            f"item {item_id or key!r} has no synthetic scene spec; the programmatic teacher only handles "
            "`perception-judge synth` items (use --teacher llm for other sources)",
        )
    family_q = (spec["family"], spec["qtype"])
    if family_q not in SOLVERS:
        raise NoCounterfactual("verify", "unknown_qtype", f"no solver for {family_q}")
    try:
        r_c, solved = solve(spec)
    except (Unsolvable, KeyError, TypeError, ValueError) as e:
        raise NoCounterfactual("verify", "rc_mismatch", f"the spec does not solve: {e}") from None
    if r_c != response or not answers_match(solved, answer):
        raise NoCounterfactual(
            "verify", "rc_mismatch", "r_c or the answer differs from what the scene spec renders"
        )
    facts = list(spec.get("facts") or [])
    if len(facts) < MIN_FACTS:
        raise NoCounterfactual("attributes", "too_few_attributes", f"{len(facts)} facts in the spec")

    rng = random.Random(f"ppjd/programmatic/{seed}/{key}")
    perceived: dict[str, Any] | None = None
    r_rp = a_rp = ""
    for _ in range(MAX_TRIES):
        attrs = perturb(spec, spec["attributes"], rng)
        try:
            text, ans = solve(spec, attrs)
        except Unsolvable:
            continue
        if not answers_match(ans, answer):
            perceived, r_rp, a_rp = attrs, text, ans
            break
    if perceived is None:
        raise NoCounterfactual("rewrite", "no_perturbation", "no misread fact changes the answer")

    slips = SLIPS[family_q]
    r_rp_r = ""
    slip_used: dict[str, Any] | None = None
    attrs_r: dict[str, Any] | None = None
    for _ in range(MAX_TRIES):
        attrs2 = perceived if rng.random() < 0.5 else perturb(spec, spec["attributes"], rng)
        if attrs2 == spec["attributes"]:
            continue
        slip = {"kind": rng.choice(slips), "delta": rng.choice((-2, -1, 1, 2))}
        try:
            text, ans = solve(spec, attrs2, slip)
        except Unsolvable:
            continue
        if answers_match(ans, answer) or answers_match(ans, a_rp) or text == r_rp:
            continue
        try:  # the perceptual error must show in the text, not only the reasoning slip
            plain, _ = solve(spec, attrs2)
        except Unsolvable:
            continue
        if plain == r_c:
            continue
        r_rp_r, slip_used, attrs_r = text, slip, attrs2
        break
    if slip_used is None or attrs_r is None:
        raise NoCounterfactual("rewrite", "no_reasoning_slip", "no slip gives a third distinct answer")
    meta = {
        "perturbed_rp": _changed_facts(spec, perceived),
        "perturbed_rp_r": _changed_facts(spec, attrs_r),
        "slip": slip_used["kind"],
    }
    return Counterfactual(r_rp=r_rp, r_rp_r=r_rp_r, facts=facts[:6], meta=meta)
