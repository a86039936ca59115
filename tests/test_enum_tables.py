"""Every table keyed by a verdict, site class, status, severity, role or predicate kind covers every member.

The tables are functions that `match` over the enum and end in `assert_never`, so mypy rejects one that
misses a member; this test is the same promise at run time (a member with no case reaches
`assert_never`, which raises), for the orders that are tuples, for the stylesheet's classes, and for
the JSON Schemas, whose closed enums must be the Python enums (documents keep the string values).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

from casekit.bisect.predicates import Direction, Predicate, PredicateKind, site_present, verdict_rank
from casekit.bisect.report import json_schema as bisect_schema
from casekit.classify import functional_failure, ran_compiled, ran_eager
from casekit.model import (
    SITE_CLASS_ORDER,
    VERDICT_ORDER,
    Case,
    FullgraphStatus,
    Gate,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Severity,
    SiteClass,
    SiteKind,
    Verdict,
    attention_rank,
)
from casekit.replay.document import replay_schema
from casekit.replay.plan import message_words
from casekit.report.markdown import icon
from casekit.report.pictures import (
    HEAT_LEGEND,
    MARK_LEGEND,
    MARKS,
    RECORDED,
    VERDICT_FILL,
    class_mark,
    script_fill,
    severity_stroke,
    verdict_fill,
    verdict_words,
)

CASE = Case(id="c", title="t", pre=ScriptSource("repro.py", "", ""), post=ScriptSource("fixed.py", "", ""))

ARGUMENTS = {PredicateKind.SITE: "repro.py:3", PredicateKind.STATUS: "post"}
# (what it is, the enum it is keyed by, the table)
TABLES: list[tuple[str, type[enum.Enum], Callable[[Any], Any]]] = [
    ("Severity.rank", Severity, lambda s: s.rank),
    ("ScriptRole.label", ScriptRole, lambda r: r.label),
    ("Case.script", ScriptRole, CASE.script),
    ("attention_rank", SiteClass, attention_rank),
    ("functional_failure", ScriptStatus, functional_failure),
    ("ran_compiled", ScriptStatus, ran_compiled),
    ("ran_eager", ScriptStatus, ran_eager),
    ("verdict_rank", Verdict, verdict_rank),
    ("site_present", SiteClass, site_present),
    ("Predicate.describe", PredicateKind, lambda kind: Predicate(kind, ARGUMENTS.get(kind)).describe()),
    ("Predicate.direction", PredicateKind, lambda kind: Predicate(kind).direction("a", "b")),
    ("class_mark", SiteClass, class_mark),
    ("verdict_fill", Verdict, verdict_fill),
    ("verdict_words", Verdict, verdict_words),
    ("severity_stroke", Severity, severity_stroke),
    ("script_fill", ScriptRole, script_fill),
    ("markdown icon", Severity, icon),
    ("commit message words", Verdict, message_words),
]


@pytest.mark.parametrize(("name", "kind", "table"), TABLES, ids=[name for name, _, _ in TABLES])
def test_every_table_has_an_entry_for_every_member(name: str, kind: type[enum.Enum], table: Any) -> None:
    entries = {member: table(member) for member in kind}  # a member without a case raises in assert_never
    assert set(entries) == set(kind)


def test_the_orders_and_the_tables_built_from_them_name_every_member_once() -> None:
    for order, kind in ((SITE_CLASS_ORDER, SiteClass), (MARK_LEGEND, SiteClass), (HEAT_LEGEND, Verdict)):
        assert sorted(order) == sorted(kind) and len(set(order)) == len(order)
    assert VERDICT_ORDER == tuple(Verdict)
    assert set(MARKS) == {RECORDED, *(c.value for c in SiteClass)}
    assert set(VERDICT_FILL) == set(Verdict)
    assert len({style.priority for style in MARKS.values()}) == len(MARKS)  # one mark is always the most telling
    assert len({style.letter for style in MARKS.values()}) == len(MARKS)  # readable without colour
    assert len({attention_rank(c) for c in SiteClass}) == len(SiteClass)


def test_the_stylesheet_colours_every_verdict_and_severity() -> None:
    css = resources.files("casekit.report").joinpath("assets/report.css").read_text(encoding="utf-8")
    classes = set(re.findall(r"\.((?:v|sev)-[a-z_]+)", css))
    assert {f"v-{v.value}" for v in Verdict} <= classes
    assert {f"sev-{s.value}" for s in Severity} <= classes


def _values(kind: type[enum.Enum]) -> list[Any]:
    return [member.value for member in kind]


def test_the_json_schemas_closed_enums_are_the_python_enums() -> None:
    replay = replay_schema()["$defs"]
    assert replay["result"]["properties"]["verdict"]["enum"] == _values(Verdict)
    assert replay["result"]["properties"]["severity"]["enum"] == _values(Severity)
    assert replay["status"]["enum"] == _values(ScriptStatus)
    assert replay["site"]["properties"]["class"]["enum"] == _values(SiteClass)
    scripts = replay["result"]["properties"]["scripts"]
    assert list(scripts["properties"]) == _values(ScriptRole) and scripts["additionalProperties"] is False
    bisect = bisect_schema()["properties"]
    assert bisect["result"]["enum"] == _values(Direction)
    assert bisect["verdict"]["enum"] == [*_values(Verdict), None]
    assert bisect["sites"]["items"]["properties"]["site_class"]["enum"] == _values(SiteClass)


def test_every_enum_keeps_its_string_values() -> None:
    """TOML and JSON hold the values; a member renamed in Python must not change what files say."""
    for kind in (Verdict, Severity, ScriptStatus, SiteClass, ScriptRole, SiteKind, Gate, FullgraphStatus):
        assert issubclass(kind, enum.StrEnum)
        assert all(f"{member}" == str(member) == member.value for member in kind)
