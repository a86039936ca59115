"""What the user asked `casekit reduce` for, and its checks: every bad input is one line before anything runs
(or, for the original's own run, right after it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from casekit.capture import read_script
from casekit.includes import collect_includes, missing_includes
from casekit.model import IncludedFile, ScriptObservation, ScriptSource, ScriptStatus
from casekit.reduce.judge.choice import BreakChoice, ReduceRefused
from casekit.reduce.judge.oracle import OracleOptions
from casekit.reduce.result import CaptureOptions
from casekit.reduce.source.lines import OriginalIndex


@dataclass
class ReduceRequest:
    """What the user asked `casekit reduce` for."""

    script: Path
    out: Path
    includes: list[Path] = field(default_factory=list)
    choice: BreakChoice = BreakChoice()
    options: OracleOptions = OracleOptions()
    jobs: int | None = None  # candidates at once [default: the cores this process may use]
    timeout: float = 300.0  # the original's runs; candidates get a bound derived from what it took
    max_seconds: float | None = None  # the whole reduction, confirming run included; the best so far kept
    backend: str = "eager"
    shrink_inputs: bool = True
    capture: CaptureOptions | None = None  # file the result as a case


@dataclass
class Inputs:
    """The checked input: the script, the files reduced beside it, the files kept as they are."""

    script: ScriptSource
    reduced: dict[str, str]  # name -> original text (the script and included Python files)
    fixed: tuple[IncludedFile, ...]
    indexes: dict[str, OriginalIndex]


def read_inputs(request: ReduceRequest) -> Inputs:
    script = read_script(request.script)
    includes = collect_includes(request.script, request.includes) if request.includes else []
    problems = missing_includes(request.script, script.source, includes)
    if problems:
        raise ReduceRefused(problems[0] + " (reduce runs the script with its included files only)")
    reduced = {script.name: script.source}
    fixed = []
    for item in includes:
        if item.path.endswith(".py") and item.text is not None:
            reduced[item.path] = item.text
        else:
            fixed.append(item)
    indexes = {}
    for name, text in reduced.items():
        try:
            indexes[name] = OriginalIndex(text)
        except SyntaxError as error:
            raise ReduceRefused(f"included file {name} is not valid Python: line {error.lineno}: {error.msg}") from None
    return Inputs(script, reduced, tuple(fixed), indexes)


def check_site(choice: BreakChoice, inputs: Inputs) -> tuple[str, int] | None:
    """--site in canonical lines; a file or line that is not code of the script is refused now."""
    if choice.site is None:
        return None
    file, line = choice.site
    index = inputs.indexes.get(file)
    if index is None:
        names = ", ".join(sorted(inputs.indexes))
        raise ReduceRefused(f"--site {file}:{line}: {file} is not a file being reduced ({names})")
    canonical = index.canonical(line)
    if canonical is None:
        if line > len(index.lines):
            raise ReduceRefused(f"--site {file}:{line}: {file} has {len(index.lines)} lines")
        raise ReduceRefused(f"--site {file}:{line}: line {line} holds no statement ({index.line_text(line)!r})")
    return (file, canonical)


def check_out(request: ReduceRequest) -> None:
    out = request.out
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ReduceRefused(f"--out {out}: not a folder")
    if out.resolve() == request.script.resolve().parent:
        raise ReduceRefused(f"--out {out}: the script's own folder (the reduced files would replace the originals)")


def refuse_original(observation: ScriptObservation, timeout: float) -> None:
    status = observation.status
    if status is ScriptStatus.OK:
        return
    why = observation.detail or status.value
    if status is ScriptStatus.TIMEOUT:
        raise ReduceRefused(
            f"the script did not finish within {timeout:g} s ({why}): raise --timeout if it is only slow"
        )
    if status is ScriptStatus.EAGER_FAILED:
        raise ReduceRefused(f"the script fails without torch.compile ({why}): reduce needs a script that runs eagerly")
    if status is ScriptStatus.MISMATCH:
        raise ReduceRefused(f"the compiled script's outputs differ from eager ({why}): reduce keeps breaks, not this")
    if status is ScriptStatus.ENV_FAILED:
        raise ReduceRefused(f"the script could not be run: {why}")
    raise ReduceRefused(f"the compiled run fails ({why}): reduce keeps a graph break, and a crash is not one")
