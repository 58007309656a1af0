"""`make mutation`'s summary: per module, how many of mutmut's mutants the tests killed, and every one they did not.

``python tests/support/mutation_report.py GLOB...`` reads mutmut's results (``mutants/**/*.meta``) of the mutants
whose names match a GLOB (the Makefile's MUTANTS) and prints one line per module, then each surviving, untested or
timed-out mutant by name (``mutmut show NAME`` prints its diff). docs/development.md lists the last scores.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path

STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    36: "timeout",
    24: "timeout",
}
STATUS |= {-24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}


def results(globs: list[str], root: Path = Path("mutants")) -> dict[str, dict[str, str]]:
    """{module: {mutant name: status}} of the mutants matching ``globs``."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        module = ".".join(meta.relative_to(root).with_suffix("").with_suffix("").parts)
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        picked = {
            k: STATUS.get(v, "suspicious")
            for k, v in codes.items()
            if any(fnmatch.fnmatch(k, g) for g in globs)
        }
        if picked:
            out[module] = picked
    return out


def main(globs: list[str]) -> int:
    found = results(globs)
    if not found:
        print("no mutmut results for these mutants: run `make mutation` first")
        return 1
    print(f"{'module':<58} {'mutants':>7} {'killed':>6} {'score':>6}  other")
    left = []
    for module, statuses in found.items():
        counts = Counter(statuses.values())
        other = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "killed") or "-"
        score = f"{counts['killed'] / len(statuses):.1%}"
        print(f"{module:<58} {len(statuses):>7} {counts['killed']:>6} {score:>6}  {other}")
        left += [f"  {status:<11} {name}" for name, status in sorted(statuses.items()) if status != "killed"]
    print(
        "\nnot killed (each is mended or named in docs/development.md):" if left else "\nevery mutant killed"
    )
    print("\n".join(left))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["*"]))
