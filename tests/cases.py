"""Cases built in code and changes made to real archives, shared by the bundle, index and report tests."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

from casekit.archive.store import Archive
from casekit.bundle import sha256_text
from casekit.model import (
    Case,
    EntryPoint,
    Frame,
    OutputCheck,
    ReplayRecord,
    ScriptObservation,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
    SiteVerdict,
)

FIXTURES = Path(__file__).parent / "fixtures" / "report"
NOW = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def make_case(case_id: str = "demo") -> Case:
    source = 'import torch\nprint("a \\"quoted\\" line")\n'
    site = Site(
        file="repro.py",
        line=6,
        function="step",
        source="if x.item() > 0:",
        category="GB0124",
        reason="Unsupported Tensor.item()",
        gb_id="GB0124",
        hints=["Set capture_scalar_outputs"],
        call_site=Frame("repro.py", 12, "<module>", "step(x)"),
        stack=[Frame("repro.py", 6, "step", "if x.item() > 0:")],
    )
    return Case(
        id=case_id,
        title="demo",
        pre=ScriptSource("repro.py", sha256_text(source), source),
        tags=["item"],
        rollback_notes="go back to fullgraph=False",
        observations={
            ScriptRole.PRE: ScriptObservation(
                status=ScriptStatus.OK,
                graphs=2,
                sites=[site],
                entries=[EntryPoint("step", "repro.py", 5, calls=1)],  # a real capture passes the gates
                check=OutputCheck(compared=1, allclose=True),
            )
        },
    )


def replayed(store: Archive, case_id: str, verdict: str, at: str) -> None:
    case = store.load(case_id)
    case.replays.append(
        ReplayRecord(
            at, "venv:torch-2.9.0", "2.9.0", "venv", verdict, Severity.WARN, {"pre": "ok"},
            [SiteVerdict("pre", SiteClass.MOVED, "repro.py:9", "data-dependent")],
        )
    )  # fmt: skip
    store.save(case)


def mutate(store: Archive) -> None:
    """Changes that move every view: a new history record, a draft, a deleted and an added case."""
    replayed(store, "item-branch", "changed", "2099-05-05T00:00:00+00:00")
    replayed(store, "shape-recompiles", "regressed", "2000-01-01T00:00:00+00:00")  # older: not the latest
    draft = store.load("print-in-forward")
    draft.tags.append("draft")
    draft.observations.pop("post", None)
    store.save(draft)
    store.path_for("logging-in-forward").unlink()
    added = copy.deepcopy(store.load("tensor-if"))
    added.id, added.title, added.post = "tensor-if-no-fix", "no fix yet", None
    store.save(added)
