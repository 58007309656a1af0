"""The ``text`` family: arithmetic word problems with no image (the unnecessary-image bias needs them)."""

from __future__ import annotations

import random
from typing import Any

from perception_judge.synth.base import Attrs, Family, Unsolvable, answer

_NAMES = (
    "Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Ines", "Ravi", "Lena", "Kofi", "Yuki", "Sara", "Tom", "Nia",
    "Ivan", "Maya",
)  # fmt: skip
_ANIMALS = (  # (four-legged singular, plural, two-legged singular, plural)
    ("cow", "cows", "chicken", "chickens"),
    ("horse", "horses", "duck", "ducks"),
    ("goat", "goats", "goose", "geese"),
    ("sheep", "sheep", "hen", "hens"),
    ("pig", "pigs", "turkey", "turkeys"),
)
_SHARED = ("stickers", "marbles", "cards", "sweets", "pencils")
_THINGS = (("notebook", "notebooks"), ("sandwich", "sandwiches"), ("ticket", "tickets"), ("plant", "plants"))


def _scene(rng: random.Random) -> tuple[Attrs, str, dict[str, Any], str]:
    qtype = rng.choice(["change", "legs", "share"])
    name = rng.choice(_NAMES)
    if qtype == "change":
        thing, things = rng.choice(_THINGS)
        p, q = rng.randint(2, 9), rng.randint(2, 6)
        bill = next(b for b in (10, 20, 50, 100) if b > p * q)
        question = (
            f"One {thing} costs {p} dollars. {name} buys {q} {things} and pays with a {bill}-dollar note. "
            f"How much change does {name} get, in dollars?"
        )
        attrs = {"numbers": {"price": p, "quantity": q, "paid": bill}}
        return attrs, qtype, {"name": name, "thing": thing, "things": things}, question
    if qtype == "legs":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        four, fours, two, twos = rng.choice(_ANIMALS)
        q = f"{name}'s farm has {a} {fours} and {b} {twos}. How many legs do these animals have altogether?"
        return {"numbers": {fours: a, twos: b}}, qtype, {"name": name, "animals": [four, fours, two, twos]}, q
    k, each = rng.randint(2, 6), rng.randint(2, 9)
    things = rng.choice(_SHARED)
    question = f"{name} shares {k * each} {things} equally among {k} friends. How many {things} does each friend get?"
    return {"numbers": {"total": k * each, "friends": k}}, qtype, {"name": name, "things": things}, question


def _solve_change(params, attrs, kind, delta):
    nums = attrs["numbers"]
    p, q, paid = nums["price"], nums["quantity"], nums["paid"]
    cost, op = (p + q, "+") if kind == "wrong_op" else (p * q, "\\times")
    change = paid - cost + (delta if kind == "arith" else 0)
    if change < 0:
        raise Unsolvable("negative change")
    steps = [
        f"Step 1: One {params['thing']} costs {p} dollars, so {q} {params['things']} cost ${p} {op} {q} = {cost}$ "
        "dollars.",
        f"Step 2: {params['name']} pays {paid} dollars, so the change is ${paid} - {cost} = {change}$ dollars.",
    ]
    return answer(steps, change)


def _solve_legs(params, attrs, kind, delta):
    four, fours, two, twos = params["animals"]
    a, b = attrs["numbers"][fours], attrs["numbers"][twos]
    legs = 4 if kind == "four_legs" else 2
    total = 4 * a + legs * b + (delta if kind == "arith" else 0)
    steps = [
        f"Step 1: Each {four} has 4 legs, so {a} {fours} have ${a} \\times 4 = {4 * a}$ legs.",
        f"Step 2: Each {two} has {legs} legs, so {b} {twos} have ${b} \\times {legs} = {legs * b}$ legs.",
        f"Step 3: Together that makes ${4 * a} + {legs * b} = {total}$ legs.",
    ]
    return answer(steps, total)


def _solve_share(params, attrs, kind, delta):
    total, k = attrs["numbers"]["total"], attrs["numbers"]["friends"]
    things = params["things"]
    if kind == "wrong_op":
        each, op = total * k, "\\times"
    else:
        if k <= 0 or total % k:
            raise Unsolvable(f"the {things} do not divide evenly")
        each, op = total // k + (delta if kind == "arith" else 0), "\\div"
    steps = [
        f"Step 1: There are {total} {things} and {k} friends.",
        f"Step 2: Each friend gets ${total} {op} {k} = {each}$ {things}.",
    ]
    return answer(steps, each)


def _perturb(attrs: Attrs, params: dict[str, Any], rng: random.Random) -> None:
    nums = attrs["numbers"]
    key = rng.choice(sorted(nums))
    if key == "total":  # keep the division exact so the misread still yields a whole answer
        nums[key] = max(nums["friends"], nums[key] + nums["friends"] * rng.choice((-2, -1, 1, 2)))
    else:
        nums[key] = max(1, nums[key] + rng.choice((-3, -2, -1, 1, 2, 3)))


def _facts(attrs: Attrs) -> list[str]:
    facts = [f"{k} = {v}" for k, v in attrs["numbers"].items()]
    return (facts + ["the question gives all the numbers needed"] * (3 - len(facts)))[:6]


FAMILY = Family(
    name="text",
    domain="math word problem",
    keywords=("arithmetic", "word problem", "numbers"),
    scene=_scene,
    questions={
        "change": (_solve_change, ("wrong_op", "arith")),
        "legs": (_solve_legs, ("four_legs", "arith")),
        "share": (_solve_share, ("wrong_op", "arith")),
    },
    perturb=_perturb,
    facts=_facts,
)
