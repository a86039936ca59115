"""Classify the identity corpus in both directions from its recorded probe fixtures and write
docs/identity.md: the confusion table (expected x got), the agreement, every disagreement.

    PYTHONPATH=$PWD python3 tests/corpus/confusion.py [--out docs/identity.md]   (make identity)

Each case was run for real on torch 2.5.1, 2.13.0, 2.14.1 and 2.15.0 (tests/corpus/record.py); the expected
class of every site, in every direction between two of them, is in tests/corpus/expected.toml,
written from the raw probe records before classifying.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from casekit.bundle import sha256_text
from casekit.classify import classify_case
from casekit.model import Case, ScriptObservation, ScriptSource
from casekit.observe import interpret

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# captured on the first release, replayed on the second
DIRECTIONS = {
    "forward": ("2.5.1", "2.13.0"),
    "reverse": ("2.13.0", "2.5.1"),
    "upgrade": ("2.13.0", "2.14.1"),
    "downgrade": ("2.14.1", "2.13.0"),
    "leap": ("2.5.1", "2.14.1"),
    "leap_back": ("2.14.1", "2.5.1"),
    "newest": ("2.14.1", "2.15.0"),
    "newest_back": ("2.15.0", "2.14.1"),
}
RELEASES = ("2.5.1", "2.13.0", "2.14.1", "2.15.0")
RECORDED_SIDE = ("persists", "moved", "gone", "unobserved")


@dataclass
class Row:
    case: str
    direction: str
    site: str
    expected: str
    got: str
    why: str = ""
    note: str = ""


def observation(case: str, release: str, fixtures: Path = HERE) -> ScriptObservation:
    """The observation of one case on one release, from its recorded probe result."""
    raw = json.loads((fixtures / case / "probe" / f"{release}.json").read_text())
    source = (HERE / case / "repro.py").read_text()
    return interpret(raw, raw["script"], "repro.py", source)


def classify_direction(case: str, direction: str, fixtures: Path = HERE) -> dict[str, tuple[str, str]]:
    """site name -> (class, note) as casekit classifies `case` captured on one release, replayed on the other."""
    captured_on, replayed_on = DIRECTIONS[direction]
    source = (HERE / case / "repro.py").read_text()
    recorded = observation(case, captured_on, fixtures)
    bundle = Case(
        id=case,
        title=case,
        pre=ScriptSource("repro.py", sha256_text(source), source),
        observations={"pre": recorded},
    )
    result = classify_case(bundle, replayed_on, {"pre": observation(case, replayed_on, fixtures)})
    got: dict[str, tuple[str, str]] = {}
    for pairing in result.scripts["pre"].sites:
        side = pairing.recorded if pairing.site_class.value in RECORDED_SIDE else pairing.observed
        assert side is not None
        name = f"{side.where()} {side.function}"
        while name in got:  # two sites at one place (a double count): keep both visible
            name += "'"
        got[name] = (pairing.site_class.value, pairing.note)
    return got


def expected_classes() -> dict[str, dict]:
    return tomllib.loads((HERE / "expected.toml").read_text())


def classify_corpus(
    names: list[str] | None = None, fixtures: Path = HERE, releases: tuple[str, ...] = RELEASES
) -> list[Row]:
    """Every expected site of the corpus (or of `names`) with the class casekit gives it, in every direction
    between two of `releases`."""
    rows: list[Row] = []
    for case, spec in sorted(expected_classes().items()):
        if names and case not in names:
            continue
        for direction in (d for d, pair in DIRECTIONS.items() if set(pair) <= set(releases)):
            got = classify_direction(case, direction, fixtures)
            for item in spec[direction]:
                cls, note = got.pop(item["site"], ("none", ""))
                rows.append(Row(case, direction, item["site"], item["class"], cls, item["why"], note))
            for name, (cls, note) in got.items():
                rows.append(
                    Row(case, direction, name, "none", cls, "not expected: a site casekit should not report", note)
                )
    return rows


CLASSES = ["persists", "moved", "gone", "new", "reappeared", "unobserved", "none"]


def confusion_markdown(rows: list[Row]) -> str:
    counts = Counter((r.expected, r.got) for r in rows)
    used = [c for c in CLASSES if any(c in (r.expected, r.got) for r in rows)]
    lines = ["| expected \\ got | " + " | ".join(used) + " |", "|---|" + "---|" * len(used)]
    for e in used:
        lines.append(f"| **{e}** | " + " | ".join(str(counts.get((e, g), "")) for g in used) + " |")
    return "\n".join(lines)


def agreement(rows: list[Row]) -> float:
    return 100.0 * sum(r.expected == r.got for r in rows) / len(rows) if rows else 0.0


def pairs(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    """The rows of each pair of releases, both directions together."""
    grouped: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        key = tuple(sorted(DIRECTIONS[row.direction], key=RELEASES.index))
        grouped.setdefault((key[0], key[1]), []).append(row)
    return grouped


def render(rows: list[Row], why: dict[str, str], rules: str) -> str:
    wrong = [r for r in rows if r.expected != r.got]
    cases = sorted({r.case for r in rows})
    out = [
        "# Break identity across releases: the corpus",
        "",
        "Generated by `make identity` (tests/corpus/confusion.py); do not edit by hand.",
        "",
        f"{len(cases)} repros taken from public PyTorch issues and PRs (tests/corpus/*/README.md cites each),",
        "each run for real on torch 2.5.1, 2.13.0, 2.14.1 and 2.15.0. Every site is classified in eight",
        "directions (captured on 2.5.1 and replayed on 2.13.0 = forward, the reverse; 2.13.0 -> 2.14.1 =",
        "upgrade, downgrade; 2.5.1 -> 2.14.1 = leap, leap_back; 2.14.1 -> 2.15.0 = newest, newest_back),",
        "against the class written down in",
        "tests/corpus/expected.toml before classifying.",
        "",
        f"**Agreement: {sum(r.expected == r.got for r in rows)}/{len(rows)} sites = {agreement(rows):.1f} %**",
        "",
        "## Confusion table (expected x got)",
        "",
        confusion_markdown(rows),
        "",
        "Per pair of releases:",
        "",
        "| releases | sites | agreement |",
        "|---|---|---|",
        *(f"| {a} <-> {b} | {len(pair)} | {agreement(pair):.1f} % |" for (a, b), pair in pairs(rows).items()),
        "",
        "## Disagreements",
        "",
    ]
    if not wrong:
        out.append("None.")
    for r in wrong:
        key = f"{r.case}/{r.direction}/{r.site}"
        out.append(f"- `{key}`: expected **{r.expected}**, got **{r.got}** ({r.note or 'no note'}).")
        out.append(f"  Why: {why.get(key, 'UNEXPLAINED')}")
    out += ["", "## Every site", "", "| case | direction | site | expected | got | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r.expected == r.got else " ✗"
        out.append(f"| {r.case} | {r.direction} | `{r.site}` | {r.expected} | {r.got}{mark} | {r.note[:110]} |")
    out += ["", rules]
    return "\n".join(out) + "\n"


def explanations() -> dict[str, str]:
    """Why each known disagreement is what it is ("case/direction/site" -> text)."""
    path = HERE / "disagreements.toml"
    data = tomllib.loads(path.read_text()) if path.exists() else {}
    return {key: value for key, value in data.get("explained", {}).items() if isinstance(value, str)}


def document() -> str:
    """docs/identity.md as the corpus makes it now."""
    rules_file = HERE / "rules.md"
    return render(classify_corpus(), explanations(), rules_file.read_text() if rules_file.exists() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "identity.md")
    args = parser.parse_args(argv)
    rows = classify_corpus()
    text = document()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"{agreement(rows):.1f} % agreement ({sum(r.expected == r.got for r in rows)}/{len(rows)}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
