"""Fuzzed bundles: mutants of the real starter bundles through validate, list, show, report and replay's
host side. What the loader accepts, every command handles; the rest is one BundleError. Never a traceback,
never a file outside the folders casekit was given.

CASEKIT_FUZZ_EXAMPLES sets the number of mutants (default 1000; CI runs the default).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekit.archive.store import Archive
from casekit.bundle import parse_case, sha256_text
from casekit.classify import classify_case
from casekit.errors import CasekitError
from casekit.model import to_plain
from casekit.replay.run import _write_scripts, case_pins
from casekit.report.formats import get_format
from casekit.report.summary import summarize
from casekit.report.text import case_summary

from ..conftest import ROOT, run_casekit

STARTERS = sorted((ROOT / "cases").glob("*.toml"))
EXAMPLES = int(os.environ.get("CASEKIT_FUZZ_EXAMPLES", "1000"))
BASES = [tomllib.loads(path.read_text()) for path in STARTERS]

hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "../../x", "/etc/passwd", "~/.bashrc", "a" * 300, "\u202e\ufeff", "é.py", "x\n.py"]),
    st.just("y" * 5000),
)
leaf = st.one_of(
    hostile_text,
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.dates(),
    st.times(),
)
value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def paths_of(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into the nested tables and lists."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, item in data.items():
            found += paths_of(item, (*prefix, key))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += paths_of(item, (*prefix, i))
    return found


def set_at(data: Any, path: tuple, new: Any, delete: bool) -> None:
    for key in path[:-1]:
        data = data[key]
    if delete:
        del data[path[-1]]
    else:
        data[path[-1]] = new


@st.composite
def mutants(draw: st.DrawFn) -> str:
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = paths_of(data)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add-unknown", "script"]))
        if action == "add-unknown" and isinstance(data, dict):
            data[draw(st.text(min_size=1, max_size=8))] = draw(value)
        elif action == "script":  # edit a script's name or source and keep its hash right: the deep checks run
            scripts = data.get("scripts")
            if not isinstance(scripts, dict):  # an earlier mutation made it something else: make it a table again
                scripts = data["scripts"] = {}
            which = draw(st.sampled_from([w for w in ("pre", "post") if w in scripts] or ["pre"]))
            script = scripts.setdefault(which, {})
            if isinstance(script, dict):
                script[draw(st.sampled_from(["name", "source"]))] = draw(hostile_text)
                if isinstance(script.get("source"), str):
                    script["sha256"] = sha256_text(script["source"])
        else:
            set_at(data, path, draw(value), delete=action == "delete")
    text = tomli_w.dumps(data)
    if draw(st.integers(0, 9)) == 0:  # sometimes break the TOML itself
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.text(max_size=5)) + text[cut + 5 :]
    return text


def exercise(text: str, folder: Path) -> str:
    """What each command does with a bundle, in-process. Returns 'rejected' or 'accepted'."""
    try:
        case = parse_case(text, folder / "fuzz.toml")
    except CasekitError:
        return "rejected"
    json.dumps(to_plain(case), allow_nan=False)  # show --json
    case_summary(case)  # show
    case_pins([case])  # replay: library pins
    scripts = folder / "batch"
    paths = _write_scripts([case], scripts)  # replay: host-side script files
    for path in paths.values():
        assert scripts.resolve() in path.resolve().parents
    classify_case(case, "fuzz", dict(case.observations))  # replay: classification against the recorded
    summary = summarize([case])  # list / report
    for name in ("md", "html", "junit", "json"):
        get_format(name).render(summary)
    archive = Archive(folder / "cases")
    saved = archive.save(case)  # a replay's history write: what was accepted is written back loadable
    assert archive.load(case.id) == case, saved
    return "accepted"


def listing() -> set[str]:
    """The repository's top folder and its starter archive (hypothesis keeps its own cache beside them)."""
    return ({*os.listdir(ROOT)} - {".hypothesis"}) | {f"cases/{name}" for name in os.listdir(ROOT / "cases")}


@pytest.mark.slow
def test_fuzzed_bundles_never_crash_a_command(tmp_path: Path) -> None:
    seen = {"accepted": 0, "rejected": 0}
    outside_before = listing()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutants())
    def run(text: str) -> None:
        folder = tmp_path / f"m{sum(seen.values())}"
        folder.mkdir()
        seen[exercise(text, folder)] += 1

    run()
    assert sum(seen.values()) >= EXAMPLES
    assert seen["accepted"] > 0 and seen["rejected"] > 0, seen  # both paths were exercised
    assert listing() == outside_before
    print(f"fuzzed bundles: {seen}")


@pytest.mark.slow
def test_a_sample_of_mutants_through_the_cli(tmp_path: Path) -> None:
    """validate, list and show --json as a user runs them: one line per bad bundle, never a traceback."""
    archive = tmp_path / "cases"
    archive.mkdir()
    samples: list[str] = []

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutants())
    def collect(text: str) -> None:
        samples.append(text)

    collect()
    for i, text in enumerate(samples):
        (archive / f"m{i}.toml").write_text(text)
    ids = [f"m{i}" for i in range(len(samples))]
    for args in (["validate"], ["list"], *(["show", case_id, "--json", "-"] for case_id in ids[:6])):
        done = run_casekit(*args, "--archive", str(archive), timeout=120)
        assert "Traceback" not in done.stderr + done.stdout, (args, done.stderr[-2000:])
        assert done.returncode in (0, 1, 2), (args, done.returncode)
    # nothing but the bundles and casekit's own scratch (the derived index, the lock, their .gitignore)
    scratch = {".casekit", ".casekit.lock", ".gitignore"}
    assert sorted(p.name for p in archive.iterdir() if p.name not in scratch) == sorted(f"{i}.toml" for i in ids)


@pytest.mark.slow
def test_accepted_mutants_still_replay(tmp_path: Path) -> None:
    """What the loader accepts, replay runs for real (one probe): a result per case, no traceback."""
    archive = tmp_path / "cases"
    archive.mkdir()
    accepted: list[str] = []

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutants())
    def collect(text: str) -> None:
        if len(accepted) >= 4:
            return
        try:
            case = parse_case(text, "mutant.toml")
        except CasekitError:
            return
        if case.id not in accepted:
            accepted.append(case.id)
            (archive / f"{case.id}.toml").write_text(text)

    collect()
    assert accepted
    out = tmp_path / "replay.json"
    done = run_casekit("replay", "--archive", str(archive), "--no-record", "--json", str(out), timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert sorted({r["case"] for r in results}) == sorted(accepted)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["scripts"]["pre"].update(source="x" * 1_100_000), "scripts.pre.source"),
        (lambda d: d.update(title="t" * 2_100_000), "title"),
        (lambda d: d.update(tags=["t"] * 100_001), "tags"),
        (lambda d: d.setdefault("environment", {}).update(packages=5), "environment.packages"),
        (lambda d: d.setdefault("environment", {}).update(built=dt.datetime(2024, 1, 1)), "environment.built"),
        (lambda d: d.update(created=dt.datetime(2024, 1, 1)), "created"),
        (lambda d: d["scripts"]["pre"].update(name="x\x00.py"), "scripts.pre.name"),
    ],
)
def test_bounds_and_exact_types_are_field_errors(edit: Any, field: str) -> None:
    data = copy.deepcopy(BASES[0])
    edit(data)
    if "source" in field:
        data["scripts"]["pre"]["sha256"] = sha256_text(data["scripts"]["pre"]["source"])
    with pytest.raises(CasekitError, match=rf"field '{field.replace('.', '[.]')}'"):
        parse_case(tomli_w.dumps(data), "fuzz.toml")
