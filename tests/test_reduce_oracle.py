"""The reducer's oracle: a candidate is kept only when its chosen break is the original's (same id, same
call site, pairing as *persists*), nothing crashes and no new break appears.

The first tests judge observations built by hand (the oracle is a pure function); the last runs real
candidates in one warm probe on this torch, so the refusals are those of real runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from casekit.model import Frame, ScriptObservation, ScriptStatus, Site
from casekit.reduce.judge.choice import BreakChoice, ReduceRefused, choose_break
from casekit.reduce.judge.oracle import Oracle, OracleOptions
from casekit.reduce.judge.probe import CandidateProbe, Layout
from casekit.reduce.source.candidate import Candidate
from casekit.reduce.source.lines import OriginalIndex, Rendered, identity_map
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProbeSession, ProgressFn, ScriptEntry
from casekit.runners.sandbox import Sandbox
from casekit.runners.warm import WarmSession

ITEM = "Unsupported Tensor.item() call with capture_scalar_outputs=False"


def item_break(line: int = 7, call_line: int = 11, gb: str = "GB0124") -> Site:
    return Site(
        file="script.py",
        line=line,
        function="f",
        source="n = y.sum().item()",
        category=gb,
        reason=ITEM,
        gb_id=gb,
        stack=[Frame("script.py", call_line, "<module>", "f(x)")],
    )


def ok(*sites: Site) -> ScriptObservation:
    return ScriptObservation(ScriptStatus.OK, graphs=2, sites=list(sites))


ORIGINAL = ok(item_break())
ORACLE = Oracle(ORIGINAL, ORIGINAL.sites[0], frozenset({"script.py"}))


def test_the_same_break_at_the_same_place_is_kept() -> None:
    assert ORACLE.judge(ok(item_break())).kept


def test_a_break_that_changed_id_is_refused() -> None:
    changed = item_break(gb="GB0036")
    changed.reason = "Dynamic shape operator"
    judgement = ORACLE.judge(ok(changed))
    assert not judgement.kept
    assert "changed id" in judgement.why or "gone" in judgement.why or "moved" in judgement.why


def test_a_break_reached_from_another_call_site_is_refused() -> None:
    judgement = ORACLE.judge(ok(item_break(call_line=14)))
    assert not judgement.kept
    assert "another call site" in judgement.why


def test_a_crash_is_not_the_break() -> None:
    for status in (ScriptStatus.COMPILE_ERROR, ScriptStatus.EAGER_FAILED, ScriptStatus.TIMEOUT):
        judgement = ORACLE.judge(ScriptObservation(status, detail="boom", sites=[item_break()]))
        assert not judgement.kept, status
        assert judgement.why.startswith(status.value)


def test_a_new_break_is_refused_unless_allowed() -> None:
    extra = Site("script.py", 9, "f", "print(n)", "GB0080", "builtin print", gb_id="GB0080")
    assert "a new break" in ORACLE.judge(ok(item_break(), extra)).why
    allowing = Oracle(ORIGINAL, ORIGINAL.sites[0], frozenset({"script.py"}), OracleOptions(allow_new=True))
    assert allowing.judge(ok(item_break(), extra)).kept


def test_a_gone_break_is_refused() -> None:
    assert "is gone" in ORACLE.judge(ok()).why


def test_keep_graphs_holds_the_graph_count() -> None:
    strict = Oracle(ORIGINAL, ORIGINAL.sites[0], frozenset({"script.py"}), OracleOptions(keep_graphs=True))
    fewer = ok(item_break())
    fewer.graphs = 1
    assert strict.judge(ok(item_break())).kept
    assert not strict.judge(fewer).kept
    assert ORACLE.judge(fewer).kept


def test_the_choice_of_break() -> None:
    library = Site("transformers/x.py", 3, "g", "", "GB0036", "Dynamic shape operator", gb_id="GB0036")
    library.call_site = Frame("script.py", 20, "<module>", "")
    two = ok(library, item_break())
    user = frozenset({"script.py"})
    assert choose_break(two, BreakChoice(), user) is two.sites[1]  # the first break in the user's own code
    assert choose_break(two, BreakChoice.parse(gb_id="gb0036"), user) is library
    assert choose_break(two, BreakChoice.parse(reason="item()"), user) is two.sites[1]
    assert choose_break(two, BreakChoice.parse(site="script.py:20"), user, ("script.py", 20)) is library
    with pytest.raises(ReduceRefused, match="does not show the break with id GB0999; it breaks at"):
        choose_break(two, BreakChoice.parse(gb_id="GB0999"), user)
    with pytest.raises(ReduceRefused, match="no graph break"):
        choose_break(ok(), BreakChoice(), user)
    with pytest.raises(ReduceRefused, match="give FILE:LINE"):
        BreakChoice.parse(site="script.py")


# ------------------------------------------------------------ real runs

ORIGINAL_SCRIPT = """\
import torch

def f(x):
    y = x * 2
    n = y.sum().item()
    return y + n

def main(x):
    return torch.compile(f, backend="eager")(x)

print(main(torch.ones(3)))
"""

VARIANTS = {
    "same": ORIGINAL_SCRIPT.replace("    y = x * 2\n", "    y = x + x\n"),
    # the break changed id: a data-dependent shape where .item() was
    "changed id": ORIGINAL_SCRIPT.replace("n = y.sum().item()", "n = y.nonzero().sum()"),
    # the same break, reached from another call: the compiled function is called from a new line
    "other call site": ORIGINAL_SCRIPT.replace(
        "print(main(torch.ones(3)))", "def other(x):\n    return main(x)\n\nprint(other(torch.ones(3)))"
    ),
    # the compiled run crashes: under fullgraph=True a print is an error, not a break
    "crash": ORIGINAL_SCRIPT.replace('backend="eager")', 'backend="eager", fullgraph=True)').replace(
        "    return y + n\n", "    print(n)\n    return y + n\n"
    ),
    # a second break appears beside the kept one
    "new break": ORIGINAL_SCRIPT.replace("    return y + n\n", "    print('n', n)\n    return y + n\n"),
}


@pytest.mark.process
def test_real_candidates_are_judged_by_casekit_pairing(tmp_path: Path) -> None:
    index = OriginalIndex(ORIGINAL_SCRIPT)
    layout = Layout("script.py", (), {"script.py": index})
    original = Candidate({"script.py": Rendered(ORIGINAL_SCRIPT, identity_map(index))})
    with WarmSession(sys.executable, ScriptEntry.REDUCE, Sandbox.from_options()) as probe:
        first = CandidateProbe(probe, layout, ORACLE, 120, lambda m: None, "eager")
        observed = first.observe([original])[0]
        assert observed.status is ScriptStatus.OK, observed.detail
        chosen = choose_break(observed, BreakChoice(), frozenset({"script.py"}))
        assert "item()" in chosen.reason
        oracle = Oracle(observed, chosen, frozenset({"script.py"}))
        candidates = CandidateProbe(probe, layout, oracle, 120, lambda m: None, "eager")
        names = list(VARIANTS)
        # a candidate's lines are placed in the original's by its own tree; here they are text edits,
        # so each variant's lines map through its own index (same statements, shifted lines)
        batch = [Candidate({"script.py": Rendered(VARIANTS[n], _map_like(VARIANTS[n], index))}) for n in names]
        verdicts = dict(zip(names, candidates.judge(batch), strict=True))
    assert verdicts["same"].kept, verdicts["same"].why
    assert not verdicts["changed id"].kept
    assert "GB" in verdicts["changed id"].why or "gone" in verdicts["changed id"].why
    assert "another call site" in verdicts["other call site"].why
    assert not verdicts["crash"].kept
    assert verdicts["crash"].why.split(":")[0] in {"compile_error", "crashed"}
    assert "a new break" in verdicts["new break"].why


def _map_like(text: str, original: OriginalIndex) -> tuple[int, ...]:
    """Each line of an edited copy to the original line of the same text (0: a line the original lacks)."""
    where: dict[str, int] = {}
    for number, line in enumerate(original.lines, 1):
        where.setdefault(line, original.canonical(number) or 0)
    return tuple(where.get(line, 0) for line in text.splitlines())


class _LostBesideOthers(ProbeSession):
    """The real warm probe, except that in a batch of more than one run the job whose script says
    "# lost beside others" comes back empty, as a run past its bound or a worker lost on a loaded host does."""

    def __init__(self, real: ProbeSession) -> None:
        self.real, self.batches = real, list[int]()

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        batch = self.real.run_probe(jobs, progress)
        self.batches.append(len(jobs))
        for job in jobs:
            if len(jobs) > 1 and "# lost beside others" in job.script.read_text():
                batch.results.pop(job.id, None)
                batch.failed[job.id] = "stopped after 10 s, past its runs' timeouts"
        return batch


@pytest.mark.process
def test_a_candidate_lost_beside_others_is_judged_on_a_run_alone(tmp_path: Path) -> None:
    index = OriginalIndex(ORIGINAL_SCRIPT)
    layout = Layout("script.py", (), {"script.py": index})
    original = Candidate({"script.py": Rendered(ORIGINAL_SCRIPT, identity_map(index))})
    lost = VARIANTS["same"] + "# lost beside others\n"
    with WarmSession(sys.executable, ScriptEntry.REDUCE, Sandbox.from_options()) as real:
        observed = CandidateProbe(real, layout, ORACLE, 120, lambda m: None, "eager").observe([original])[0]
        oracle = Oracle(
            observed, choose_break(observed, BreakChoice(), frozenset({"script.py"})), frozenset({"script.py"})
        )
        probe = _LostBesideOthers(real)
        said: list[str] = []
        candidates = CandidateProbe(probe, layout, oracle, 120, said.append, "eager")
        batch = [Candidate({"script.py": Rendered(t, _map_like(t, index))}) for t in (lost, VARIANTS["new break"])]
        verdicts = candidates.judge(batch)
    assert verdicts[0].kept, verdicts[0].why  # what it is alone: the same break, kept
    assert not verdicts[1].kept and "a new break" in verdicts[1].why  # a real refusal is not run again
    assert probe.batches == [2, 1] and candidates.stats.alone == 1
    assert said == ["a candidate's run ended env_failed beside others: running it alone"]
