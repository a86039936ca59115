"""The reduction's pipeline: every pass, in the order it runs. The one list both processes read.

The reducer (`run.py`) picks the steps a request asks for (`steps_for`: the input passes go with
`--no-inputs`) and sends their names to the explorer (`explore/explorer.py`), which runs them, in this
order, with `run_pipeline`. Coarse cuts come first, each one candidate or a few (every later candidate
then runs a smaller, faster script), the fine steps after, and the tidy stage last: each of its steps
is a candidate the oracle judges like any other.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from casekit.reduce.passes import (
    after_break,
    before_break,
    compile_call,
    docstrings,
    files,
    finish,
    literals,
    loops,
    made_up_inputs,
    minimize,
    parameters,
    results,
    sizes,
    stand_ins,
    statements,
    unread,
    unrun,
    variables,
)
from casekit.reduce.passes.base import Search, Skipped


@dataclass(frozen=True)
class Step:
    """One pass: what it tries (the progress line says it) and the function that proposes its candidates."""

    name: str
    run: Callable[[Search], None]
    inputs: bool = False  # it shrinks or rewrites the inputs: left out with --no-inputs
    tidy: bool = False  # it finishes the result: it runs even when the time for reducing is up


@dataclass(frozen=True)
class Rounds:
    """Steps repeated while a round changes something: what one step frees, the next one takes."""

    name: str
    steps: tuple[Step, ...]
    most: int


UNREAD = Step("what nothing reads any more", unread.run)
FILES = Step("whole included files", files.run)
STATEMENTS = Step("whole statements, halves first", statements.run)
VARIABLES = Step("single-use variables written in place", variables.run)
PARAMETERS = Step("unused parameters and the arguments passed for them", parameters.run)
RESULTS = Step("unused results and the names they were unpacked into", results.run)

PIPELINE: tuple[Step | Rounds, ...] = (
    # coarse: one candidate or a few each, from what the original's run told
    Step("code the original never ran", unrun.run),
    Step("what follows the break in each frame of its call path", after_break.run),
    Step("inputs of the compiled call written as literals", made_up_inputs.run, inputs=True),
    Step("what each frame of its call path recomputes before the break", before_break.run),
    # what only fed the inputs made up, what followed the break or what was recomputed before it
    Rounds("what the cuts left unread", (PARAMETERS, RESULTS, UNREAD), most=3),
    Step("loops run once: one layer, one step, one batch", loops.run),
    UNREAD,
    Step("config literals written in place", literals.run),
    Step("loop counts", sizes.loops, inputs=True),
    FILES,
    # whole statements, then what they fed
    Rounds("statements", (STATEMENTS, UNREAD, FILES), most=3),
    VARIABLES,
    # fine: pysource-minimize's expressions, arguments and bodies
    Rounds("minimize", (Step("expressions, arguments, the rest (pysource-minimize)", minimize.run), UNREAD), most=2),
    PARAMETERS,
    Rounds("what the parameters fed", (STATEMENTS, UNREAD, FILES), most=2),
    VARIABLES,
    Step("shapes, loop counts and sizes", sizes.every_size, inputs=True),
    # tidy: the result as a maintainer would file it (these run even when the time for reducing is up)
    Step("unused parameters left, with their arguments", parameters.run, tidy=True),
    Step("unused results left, with the names they were unpacked into", results.run, tidy=True),
    # imports, definitions and members nothing reads: a reduction cut short by --max-time ends in the
    # middle of pysource-minimize's round, before the unread bindings step that follows it
    Step("what nothing reads, left", unread.run, tidy=True),
    Step("included files no import names, left", files.unimported, tidy=True),
    Step("stand-in values written as the kind they stand for", stand_ins.run, tidy=True),
    Step("the compile call as the original wrote it", compile_call.run, tidy=True),
    Step("docstrings of the kept definitions", docstrings.run, tidy=True),
    Step("comments of the kept lines, formatted", finish.run, tidy=True),
)


def steps_for(shrink_inputs: bool) -> tuple[str, ...]:
    """The names of the steps a request runs, in the pipeline's order (the reducer sends them)."""
    names: list[str] = []
    for entry in PIPELINE:
        for step in entry.steps if isinstance(entry, Rounds) else (entry,):
            if (shrink_inputs or not step.inputs) and step.name not in names:
                names.append(step.name)
    return tuple(names)


def last_step() -> frozenset[str]:
    """The step that writes the result out as it is filed: judged even past the deadline (one candidate)."""
    return frozenset({PIPELINE[-1].name}) if isinstance(PIPELINE[-1], Step) else frozenset()


def tidy_steps() -> frozenset[str]:
    """The steps that finish the result (the reducer judges them even when the time for reducing is up)."""
    return frozenset(e.name for e in PIPELINE if isinstance(e, Step) and e.tidy)


def run_pipeline(search: Search, names: Iterable[str]) -> None:
    """Run the named steps of the pipeline, in its order (the explorer's side). When the reducer answers
    that the time for reducing is up (`Skipped`), only the tidy steps still run."""
    wanted = frozenset(names)
    skipping = False
    for entry in PIPELINE:
        steps = [s for s in (entry.steps if isinstance(entry, Rounds) else (entry,)) if s.name in wanted]
        steps = [s for s in steps if s.tidy or not skipping]
        try:
            for _ in range(entry.most if isinstance(entry, Rounds) else 1):
                before = _dump(search)
                for step in steps:
                    search.say(step.name)
                    step.run(search)
                if not steps or _dump(search) == before:
                    break
        except Skipped:
            skipping = True


def _dump(search: Search) -> list[str]:
    return [ast.dump(tree) if tree is not None else "-" for tree in search.trees.values()]
