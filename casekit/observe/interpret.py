"""Turning one raw probe result into a `ScriptObservation`.

Sources are combined and de-duplicated, because none is complete on its own:
the graph_breaks log (not written for data-dependent branches before 2.6), Dynamo's
list of compile reasons (misses breaks before an empty graph), the structured
trace (2.6+ break artifacts), the graph count from the counting backend (one
case compiles to two graphs with no break logged at all), WON'T CONVERT records.
"""

from __future__ import annotations

import ast
import re
import statistics
from typing import Any, Protocol

from casekit.model import (
    CallInfo,
    EntryPoint,
    ErrorInfo,
    FallbackFrame,
    Frame,
    FullgraphStatus,
    OutputCheck,
    Recompile,
    ScriptObservation,
    ScriptStatus,
    Site,
    SiteKind,
)
from casekit.observe.logs import (
    FRAME_LINE,
    USER_CODE_AT,
    RawBreak,
    error_headline,
    parse_frames,
    parse_graph_break,
    parse_recompile,
    parse_wont_convert,
)
from casekit.observe.probe_output import checked_result
from casekit.observe.reasons import categorize, gb_id_from_text, normalize_function, registry
from casekit.pysource import first_statement_lines, parse_python, statement_lines

HARNESS_FILES = ("<frozen runpy>", "runpy.py", "probe.py")
SITE_PACKAGES = re.compile(r"(?:site|dist)-packages/(?P<rel>.+)$")
# An absolute path inside a text (a reason, an explanation): a file or folder, never a URL's "//host"
ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/])/[^\s'\"():,<>\[\]]+")
STDLIB = re.compile(r"/lib/python\d+\.\d+/(?P<rel>.+)$")
FROM_USER_CODE = "from user code:"
UNEXPLAINED_CUT = "step_unsupported"  # 2.5.1's compile reason for a frame cut where no break was logged
SHORT_DTYPE = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "bool": "b8",
}


class PathNamer:
    """Names files the way a bundle stores them: the script by its name, libraries
    relative to their package root, never by an absolute path (it differs per machine)."""

    def __init__(self, script_path: str, script_name: str) -> None:
        self.script_path = script_path
        self.script_name = script_name
        self.script_dir = script_path.rsplit("/", 1)[0] if "/" in script_path else ""

    def is_script(self, file: str) -> bool:
        return (
            file == self.script_path
            or file == self.script_name
            or (
                bool(self.script_dir)
                and file.startswith(self.script_dir + "/")
                and file.endswith("/" + self.script_name)
            )
        )

    def is_harness(self, file: str) -> bool:
        return file.endswith(HARNESS_FILES) and not self.is_script(file)

    def is_user(self, file: str) -> bool:
        return self.is_script(file)

    def scrub(self, text: str) -> str:
        """Text with the batch's temporary path of the script replaced by the script's name, and every other
        path of a Python file or of a library folder named as the bundle names files (a library relative
        to its package root, `torch/distributions/constraints.py`): never where the target's interpreter
        lives on this machine (`~/.cache/casekit/envs/torch-2.5.1-.../site-packages/...`)."""
        if not text:
            return text
        if self.script_dir:
            text = text.replace(self.script_path, self.script_name).replace(self.script_dir + "/", "")
        return ABSOLUTE_PATH.sub(lambda match: self._portable(match.group(0)), text)

    def _portable(self, path: str) -> str:
        if path.endswith(".py"):
            return self.name(path)
        for pattern in (SITE_PACKAGES, STDLIB):
            match = pattern.search(path)
            if match:
                return match["rel"]
        return path

    def name(self, file: str) -> str:
        if self.is_script(file):
            return self.script_name
        if self.script_dir and file.startswith(self.script_dir + "/"):
            return file[len(self.script_dir) + 1 :]  # a helper module beside the script
        for pattern in (SITE_PACKAGES, STDLIB):
            match = pattern.search(file)
            if match:
                return match["rel"]
        return file.rsplit("/", 1)[-1]


INTERNAL = re.compile(r"/torch/_(dynamo|inductor|functorch|subclasses)/")


class FileNamer(Protocol):
    """How a source of observations names files (a captured script, or an imported log's user files)."""

    def is_harness(self, file: str) -> bool: ...

    def is_user(self, file: str) -> bool: ...

    def name(self, file: str) -> str: ...


def _normalize_frames(frames: list[Frame], namer: FileNamer) -> list[Frame]:
    # Dynamo's own frames never hold a user's break; they only leak in through clipped tracebacks
    kept = [f for f in frames if not namer.is_harness(f.file) and not INTERNAL.search(f.file)]
    return [Frame(namer.name(f.file), f.line, normalize_function(f.function), f.source) for f in kept]


def _clean_user_traceback(excerpt: str, namer: FileNamer) -> str:
    """Drop casekit's own frames (probe.py, runpy) from an excerpt and name files as the bundle does."""
    kept: list[str] = []
    skipping = False
    for line in excerpt.splitlines():
        match = FRAME_LINE.match(line)
        if match:
            skipping = namer.is_harness(match["file"]) or bool(INTERNAL.search(match["file"]))
            if not skipping:
                line = line.replace(f'"{match["file"]}"', f'"{namer.name(match["file"])}"')
        elif skipping and line.startswith("    "):
            continue
        else:
            skipping = False
        if not skipping:
            kept.append(line)
    text = "\n".join(kept)
    return USER_CODE_AT.sub(lambda m: f"in user code at {namer.name(m['file'])}:{m['line']}", text)


def site_from_raw(raw: RawBreak, namer: FileNamer, source: str) -> Site | None:
    """A `Site` as a bundle records it: innermost frame, the user's call site, normalized category."""
    kept = [f for f in raw.frames if not namer.is_harness(f.file) and not INTERNAL.search(f.file)]
    # the module-level line that called the compiled function is outside the trace (2.6+ print it, 2.5 does not)
    while len(kept) > 1 and kept[0].function == "<module>":
        kept = kept[1:]
    if not kept:
        return None
    frames = _normalize_frames(kept, namer)
    inner = frames[-1]
    user = [named for named, original in zip(frames, kept, strict=True) if namer.is_user(original.file)]
    call_site = user[-1] if user else None
    category, gb_id = categorize(raw.reason, gb_id=gb_id_from_text(raw.gb_id_text), gb_type=raw.gb_type)
    info = registry().get(gb_id or category)
    return Site(
        file=inner.file,
        line=inner.line,
        function=inner.function,
        source=inner.source,
        category=category,
        reason=raw.reason.strip().splitlines()[0] if raw.reason.strip() else category,
        gb_id=gb_id,
        explanation=raw.explanation or (info.explanation if info else ""),
        hints=list(raw.hints) or (list(info.hints) if info else []),
        call_site=call_site if call_site and call_site != inner else None,
        stack=frames,
        kind=SiteKind.SKIP if raw.skip else SiteKind.BREAK,
        excerpt=_clean_user_traceback(raw.excerpt, namer),
        sources=[source],
    )


def _nested(a: Site, b: Site) -> bool:
    """One site's stack runs through the other's frame: the outer line is a call site of the inner break."""
    outer, inner = (a, b) if len(a.stack) <= len(b.stack) else (b, a)
    if not outer.stack or len(inner.stack) <= len(outer.stack):
        return False
    frame = outer.stack[-1]
    return any((f.file, f.line) == (frame.file, frame.line) for f in inner.stack[:-1])


def _fuller_stack(site: Site, new: Site) -> bool:
    """Dynamo's own frame stack (compile reasons) beats a printed traceback of the same break that lost
    a frame: a resume function's script frame, or a library frame a polyfill replaced in the print."""
    if new.sources != ["reasons"] or not new.stack:
        return False
    if site.call_site is None:
        return new.call_site is not None
    return new.call_site == site.call_site and len(new.stack) > len(site.stack)


def _merge_site(sites: list[Site], new: Site) -> None:
    """Same place and category: one site, counted; same place from a weaker source: ignored;
    same place where one runs through the other (a lambda defined and called on the line): one break."""
    for site in sites:
        same_place = site.file == new.file and site.line == new.line
        if same_place and (site.category == new.category or "log" not in new.sources or _nested(site, new)):
            if new.sources[0] not in site.sources:
                site.sources.append(new.sources[0])
            if "log" in new.sources and site.category == new.category:
                site.count += 1
            if site.function == "?" and new.function != "?":
                site.function, site.source, site.stack = new.function, new.source, new.stack
            elif _fuller_stack(site, new):
                site.stack, site.call_site = new.stack, new.call_site
            return
    sites.append(new)


def _merge_call_sites(sites: list[Site]) -> list[Site]:
    """A site whose line is a call site on the stack of an observed break is that break seen from its
    parent frame (Dynamo names the caller's line too): never a second break. So is a compile-reason-only
    site there, and a logged one whose reason names the function below it in another file (the caller's
    record of a library function it could not inline). A logged break on that line with only the same id
    is a break of its own: `mean_value(y) + x.max().item()` breaks twice, in the helper and on the line."""
    kept = []
    for site in sites:
        parent_of = [
            other
            for other in sites
            if other is not site
            and "log" in other.sources
            and any((f.file, f.line) == (site.file, site.line) for f in other.stack[:-1])
        ]
        seen_from_caller = [other for other in parent_of if _same_break_from_its_caller(site, other)]
        if site.sources == ["reasons"] and not parent_of:
            parent_of = [other for other in sites if _cut_at_the_call_of(site, other)]
            for callee in parent_of[:1]:
                _called_from(callee, site)
        if (site.sources == ["reasons"] and parent_of) or seen_from_caller:
            below = (seen_from_caller or parent_of)[0]
            below.sources += [source for source in site.sources if source not in below.sources]
            continue
        kept.append(site)
    return kept


def _same_break_from_its_caller(caller: Site, callee: Site) -> bool:
    """`callee` is a break in another file below `caller`'s line, and `caller`'s reason names the callee's
    function (an inlining failure of it: "SKIPPED INLINING", "inline in skipfiles: f"). The same id alone
    is no proof: two `.item()` calls, one in the library function and one on the line, are two breaks."""
    if callee.file == caller.file or caller.kind is SiteKind.SKIP and callee.kind is not SiteKind.SKIP:
        return False
    return callee.function not in ("?", "<module>") and bool(
        re.search(rf"\b{re.escape(callee.function)}\b", caller.reason)
    )


def _cut_at_the_call_of(caller: Site, callee: Site) -> bool:
    """2.5.1 cuts a frame at an instruction that implicitly calls a function it cannot trace (a property read
    as `model.loss_function`) with the bare reason "step_unsupported" and logs nothing there; the function then
    runs on its own and its frame logs the real break with no caller on the stack. That logged break, in
    another file, in a function the caller's line names, is the cause of the cut: one break."""
    if caller.reason != UNEXPLAINED_CUT or "log" not in callee.sources or callee.file == caller.file:
        return False
    ran_alone = len(callee.stack) <= 1  # no caller on its stack: Dynamo compiled it as a frame of its own
    return (
        ran_alone
        and callee.function not in ("?", "<module>")
        and bool(re.search(rf"\b{re.escape(callee.function)}\b", caller.source))
    )


def _called_from(callee: Site, cut: Site) -> None:
    """The cut's frames are the callers the library break's own record lacked (2.5.1 compiled the function as
    a frame of its own): the break then reads as later releases record it, reached from the user's line."""
    if cut.stack and len(callee.stack) <= 1:
        callee.stack = [*cut.stack, *callee.stack]
        callee.call_site = cut.call_site or cut.anchor


RESUMED_AT = re.compile(r"^torch_dynamo_resume_in_.+_at_(?P<line>\d+)$")


def _resumed_into_same_break(raw: RawBreak, site: Site, sites: list[Site]) -> bool:
    """A resume function that restarts on the line whose break made it and gives up there (2.5: a `with` on a
    skipped context manager breaks on the call, then its resume skips on BEFORE_WITH): one break, seen twice."""
    resumed = RESUMED_AT.match(raw.frames[-1].function) if raw.frames else None
    if not (raw.skip and resumed and int(resumed["line"]) == site.line):
        return False
    place = (site.file, site.line, site.function)
    return any(other.kind is SiteKind.BREAK and (other.file, other.line, other.function) == place for other in sites)


def collect_sites(run: dict[str, Any], namer: PathNamer) -> list[Site]:
    sites: list[Site] = []
    for record in run.get("records", []):
        if record.get("kind") != "graph_breaks":
            continue
        raw = parse_graph_break(record["message"], record.get("exc_type"), record.get("exc_message"))
        if record.get("exc_gb_type") and not raw.gb_type:
            raw.gb_type = record["exc_gb_type"]
        site = site_from_raw(raw, namer, "log")
        if site and not _resumed_into_same_break(raw, site, sites):
            _merge_site(sites, site)
    for event in run.get("trace_events", []):
        if event.get("kind") == "dynamo_graph_break_reason" and event.get("payload"):
            site = site_from_raw(parse_graph_break(event["payload"]), namer, "trace")
            if site:
                _merge_site(sites, site)
    for reason in run.get("compile_reasons", []):
        frames = [Frame(f["file"], int(f["line"]), f["function"], f.get("source", "")) for f in reason["stack"]]
        raw = parse_graph_break("", None, reason["reason"])
        raw.frames = frames
        site = site_from_raw(raw, namer, "reasons")
        if site:
            _merge_site(sites, site)
    return _merge_call_sites(sites)


def collect_fallbacks(run: dict[str, Any], namer: PathNamer, sites: list[Site]) -> list[FallbackFrame]:
    """Functions that ran with no graph at all: WON'T CONVERT, skip-type breaks, and
    entry points called while nothing compiled (graph count 0: count graphs, not log lines).

    One function is reported once, by where it starts when that is known (WON'T
    CONVERT and entry points know it; a skip-type break only knows its own line).
    """
    candidates: list[FallbackFrame] = []
    for record in run.get("records", []):
        if record.get("kind") == "convert_frame":
            raw = parse_wont_convert(record["message"], record.get("exc_message"))
            if raw and not namer.is_harness(raw.file):
                candidates.append(
                    FallbackFrame(normalize_function(raw.function), namer.name(raw.file), raw.line, raw.reason)
                )
    if run.get("status") == "ok" and not run.get("graphs"):
        for entry in run.get("entries", {}).values():
            if entry.get("calls"):
                file, line = namer.name(entry.get("file") or "?"), int(entry.get("line") or 0)
                candidates.append(FallbackFrame(entry["name"], file, line, "called, but no graph was compiled"))
    # a skip-type break only guesses which frame fell back (its script line); WON'T CONVERT knows it
    # (2.10+ say "Skipping the function" for a library frame below the script line too)
    known = bool(candidates)
    for site in sites:
        if site.kind is SiteKind.SKIP and not known:
            frame = site.anchor
            candidates.append(FallbackFrame(frame.function, frame.file, frame.line, site.reason))
    fallbacks: list[FallbackFrame] = []
    for candidate in candidates:
        duplicate = any(
            (f.file, f.line) == (candidate.file, candidate.line)
            or (f.file, f.function) == (candidate.file, candidate.function)
            for f in fallbacks
        )
        if not duplicate:
            fallbacks.append(candidate)
    return fallbacks


def collect_recompiles(run: dict[str, Any], namer: PathNamer) -> list[Recompile]:
    recompiles = []
    for record in run.get("records", []):
        if record.get("kind") == "recompiles":
            raw = parse_recompile(record["message"])
            if raw and not namer.is_harness(raw.file):
                recompiles.append(
                    Recompile(normalize_function(raw.function), namer.name(raw.file), raw.line, raw.reasons)
                )
    return recompiles


def describe_input(value: dict[str, Any]) -> str:
    kind = value.get("kind")
    if kind == "tensor":
        dtype = value.get("dtype", "?")
        short = SHORT_DTYPE.get(dtype, dtype)
        return f"{short}{value.get('shape')} {value.get('device')}"
    if kind in ("list", "tuple"):
        return f"{kind}[" + ", ".join(describe_input(v) for v in value.get("items", [])) + "]"
    if kind == "dict":
        return "dict{" + ", ".join(f"{k}: {describe_input(v)}" for k, v in value.get("items", {}).items()) + "}"
    if "value" in value and kind in ("int", "float", "bool", "str"):
        return f"{kind}={value['value']!r}"
    return str(kind)


def _entry_points(compiled: dict[str, Any], eager: dict[str, Any] | None, namer: PathNamer) -> list[EntryPoint]:
    entries = []
    for name, entry in compiled.get("entries", {}).items():
        times = [c["seconds"] for c in compiled.get("calls", []) if c["entry"] == name]
        eager_times = [c["seconds"] for c in (eager or {}).get("calls", []) if c["entry"] == name]
        entries.append(
            EntryPoint(
                name=name,
                file=namer.name(entry.get("file") or "?"),
                line=int(entry.get("line") or 0),
                calls=int(entry.get("calls", 0)),
                first_call_s=times[0] if times else None,
                steady_s=statistics.median(times[1:]) if len(times) > 1 else None,
                eager_first_s=eager_times[0] if eager_times else None,
                eager_steady_s=statistics.median(eager_times[1:]) if len(eager_times) > 1 else None,
                fullgraph_requested=bool(entry.get("fullgraph_requested")),
            )
        )
    return entries


def _output_check(compiled: dict[str, Any], eager: dict[str, Any] | None = None) -> OutputCheck:
    """The compiled outputs against eager's: `allclose` over the calls that could be compared (None when
    none could), every call with a comparison counted, what could not be compared said in `detail`."""
    comparisons = [c["comparison"] for c in compiled.get("calls", []) if c.get("comparison")]
    unsaved = (eager or {}).get("outputs_saved")
    if not comparisons and isinstance(unsaved, str):  # eager's outputs never reached the compiled run
        returned = sum(1 for c in compiled.get("calls", []) if not c.get("raised"))
        return (
            OutputCheck(compared=returned, detail=f"outputs not comparable: {unsaved}"[:500])
            if returned
            else OutputCheck()
        )
    if not comparisons:
        return OutputCheck()
    compared = [c for c in comparisons if c.get("allclose") is not None]
    max_abs = max((c["max_abs"] for c in compared if c.get("max_abs") is not None), default=None)
    max_rel = max((c["max_rel"] for c in compared if c.get("max_rel") is not None), default=None)
    details = sorted({c["detail"] for c in comparisons if c.get("detail")})
    return OutputCheck(
        compared=len(comparisons),
        allclose=all(c["allclose"] for c in compared) if compared else None,
        max_abs=max_abs,
        max_rel=max_rel,
        detail="; ".join(details),
    )


def _error_info(run: dict[str, Any], namer: PathNamer) -> ErrorInfo | None:
    exception = run.get("exception")
    if not exception:
        return None
    message = exception.get("message", "")
    location = None
    head, _, user_part = message.partition(FROM_USER_CODE)
    user_frames = _normalize_frames(parse_frames(user_part), namer) if user_part else []
    if user_frames:
        location = user_frames[-1]
    elif exception.get("script_line"):
        location = Frame(
            namer.script_name,
            int(exception["script_line"]),
            normalize_function(exception.get("script_function") or "?"),
            exception.get("script_source") or "",
        )
    first = head.strip().splitlines()
    summary = "\n".join(first[:6]) if first else exception.get("type", "")
    return ErrorInfo(type=exception.get("type", "Exception"), message=summary, location=location)


# What torch raises when a script asks for CUDA that the target cannot give: a CPU build, or a CUDA
# build on a host without a GPU or driver. The case is not broken; the target is the wrong one for it.
NEEDS_GPU = re.compile(
    r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available"
    r"|no CUDA-capable device is detected|CUDA driver initialization failed"
)


def needs_gpu(run: dict[str, Any]) -> bool:
    """The run raised because the script needs a GPU this target lacks (not a problem of the case)."""
    exception = run.get("exception") or {}
    return run.get("status") == "raised" and bool(NEEDS_GPU.search(str(exception.get("message") or "")))


def _run_failure(run: dict[str, Any]) -> str | None:
    """None when the run finished normally; else a short why."""
    status = run.get("status")
    if status == "ok":
        return None
    if status == "exited":
        return f"exited with code {run.get('exit_code')}"
    if status == "raised":
        exception = run.get("exception") or {}
        return f"{exception.get('type', 'Exception')}: {error_headline(exception.get('message') or '')}"
    if status == "timeout":
        return f"timed out after {run.get('timeout_s')} s"
    if status == "killed":
        return f"killed by signal {run.get('signal')}"
    return f"crashed ({status}, exit code {run.get('exit_code')})"


def _stopped_early(eager: dict[str, Any] | None, compiled: dict[str, Any], namer: PathNamer) -> str | None:
    """Why the compiled run did not finish the script as the eager run did (it stopped at an exit the eager
    run never reached: `sys.exit(0)` only under compile reads as "ok" otherwise), or None."""
    ran, stopped = (eager or {}).get("ended"), compiled.get("ended")
    if not isinstance(ran, dict) or not isinstance(stopped, dict) or stopped.get("by") in (None, "end"):
        return None
    if ran.get("by") == stopped.get("by") and ran.get("at") == stopped.get("at"):
        return None  # both stopped at the same exit (`sys.exit(main())`): the script's own end
    where = stopped.get("at")
    place = f" at {namer.name(str(where[0]))}:{where[1]}" if isinstance(where, list) and len(where) == 2 else ""
    how = f"{stopped.get('by')}({compiled.get('exit_code') or 0}){place}"
    if ran.get("by") == "end":
        return f"stopped early with {how}, where the eager run ran to its end"
    other = ran.get("at")
    at = f" at {namer.name(str(other[0]))}:{other[1]}" if isinstance(other, list) and len(other) == 2 else ""
    return f"stopped with {how}, where the eager run stopped with {ran.get('by')}{at}"


def script_imports(source: str) -> set[str]:
    """Top-level module names a script imports (its own imports, not torch's)."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _packages(runs: dict[str, Any], imports: set[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for run in runs.values():
        found.update(run.get("imported_packages") or {})
    wanted = {name.lower().replace("_", "-") for name in imports}
    return {dist: version for dist, version in sorted(found.items()) if dist.lower().replace("_", "-") in wanted}


def _log_excerpt(sites: list[Site], recompiles: list[Recompile]) -> str:
    parts = [site.excerpt for site in sites if site.excerpt]
    parts += [f"Recompiling function {r.function} in {r.file}:{r.line}: " + "; ".join(r.reasons) for r in recompiles]
    return "\n\n".join(parts)[:12000]


def _timing_load(raw: dict[str, Any]) -> str | None:
    """The probe's mark when timings were taken beside other runs ("parallel:N"); None when alone."""
    load = raw.get("timing_load")
    return load if isinstance(load, str) and load.startswith("parallel:") else None


def interpret(raw: dict[str, Any], script_path: str, script_name: str, script_source: str = "") -> ScriptObservation:
    """One probe result (eager + compiled [+ fullgraph] runs) -> one ScriptObservation.

    Raises ProbeOutputError when the result is not what the casekit.probe/1 schema describes."""
    raw = checked_result(raw)
    namer = PathNamer(script_path, script_name)
    runs: dict[str, Any] = raw.get("runs", {})
    eager = runs.get("eager")
    compiled = runs.get("compiled") or {}
    sites = collect_sites(compiled, namer)
    recompiles = collect_recompiles(compiled, namer)
    fallbacks = collect_fallbacks(compiled, namer, sites)
    check = _output_check(compiled, eager)
    observation = ScriptObservation(
        status=ScriptStatus.OK,
        graphs=len(compiled.get("graphs", [])),
        sites=sites,
        fallback_frames=fallbacks,
        recompiles=recompiles,
        entries=_entry_points(compiled, eager, namer),
        calls=[
            CallInfo(c["entry"], c["index"], [describe_input(a) for a in c.get("args", [])], c["seconds"])
            for c in compiled.get("calls", [])[:50]
        ],
        check=check,
        eager_wall_s=(eager or {}).get("wall_s"),
        compiled_wall_s=compiled.get("wall_s"),
        timing_load=_timing_load(raw),
        packages=_packages(runs, script_imports(script_source)),
        log_excerpt=_log_excerpt(sites, recompiles),
        stdout_tail=(compiled.get("stdout_tail") or (eager or {}).get("stdout_tail") or "")[-2000:],
    )
    eager_failure = _run_failure(eager) if eager else None
    compiled_failure = _run_failure(compiled) if compiled else "no compiled run"
    compiled_failure = compiled_failure or _stopped_early(eager, compiled, namer)
    # the script uses what this release lacks: nothing about it can be observed (a stance's name is
    # checked only when compiling; anything else the compiled run lacks is the compiler's failure)
    failed_run = eager if eager_failure else compiled
    lacks = _lacks(failed_run)
    if lacks and not eager_failure and not lacks.startswith("the compiler stance "):
        lacks = None
    probe_failure = casekit_failure(runs)
    if probe_failure:  # casekit's own code failed around the script: nothing is the script's doing
        observation.status = ScriptStatus.ENV_FAILED
        observation.detail = probe_failure
    elif eager_failure and needs_gpu(eager or {}):
        observation.status = ScriptStatus.ENV_FAILED
        observation.detail = (
            f"the script needs a GPU this target lacks ({eager_failure}); not a broken case: "
            "replay it on a GPU host (a CUDA build: --cuda cu126)"
        )
        observation.error = _error_info(eager or {}, namer)
    elif lacks:
        observation.status = ScriptStatus.UNOBSERVED
        observation.detail = f"this release lacks {lacks}"
        observation.error = _error_info(failed_run or {}, namer)
    elif eager_failure:
        observation.status = ScriptStatus.TIMEOUT if eager.get("status") == "timeout" else ScriptStatus.EAGER_FAILED  # type: ignore[union-attr]
        observation.detail = "eager baseline: " + eager_failure
        observation.error = _error_info(eager or {}, namer)
    elif compiled_failure:
        status = compiled.get("status")
        if status == "timeout":
            observation.status = ScriptStatus.TIMEOUT
        elif status in ("raised", "exited", "ok"):  # "ok": it stopped early, at an exit eager never reached
            observation.status = ScriptStatus.COMPILE_ERROR
        else:
            observation.status = ScriptStatus.CRASHED
        observation.detail = "compiled run: " + compiled_failure
        observation.error = _error_info(compiled, namer)
    elif check.allclose is False:
        observation.status = ScriptStatus.MISMATCH
        observation.detail = f"compiled output differs from eager (max abs {check.max_abs}, max rel {check.max_rel})"
    for site in observation.sites:  # shared records: no machine-specific paths
        site.excerpt, site.explanation = namer.scrub(site.excerpt), namer.scrub(site.explanation)
        site.reason, site.hints = namer.scrub(site.reason), [namer.scrub(hint) for hint in site.hints]
    for fallback in observation.fallback_frames:
        fallback.reason = namer.scrub(fallback.reason)
    for recompile in observation.recompiles:
        recompile.reasons = [namer.scrub(reason) for reason in recompile.reasons]
    observation.detail = namer.scrub(observation.detail)
    observation.log_excerpt = namer.scrub(observation.log_excerpt)
    if observation.error:
        observation.error.message = namer.scrub(observation.error.message)
    fullgraph = runs.get("fullgraph")
    if fullgraph:
        stopped = _stopped_early(eager, fullgraph, namer)  # swallowed its error, then exited: not one graph
        one_graph = fullgraph.get("status") == "ok" and stopped is None
        observation.fullgraph_status = FullgraphStatus.OK if one_graph else FullgraphStatus.ERROR
        observation.fullgraph = None if one_graph else _error_info(fullgraph, namer)
        if not one_graph and observation.fullgraph is None:
            failure = _run_failure(fullgraph) or stopped or ""
            observation.fullgraph = ErrorInfo(type=str(fullgraph.get("status")), message=failure)
    if observation.fullgraph:
        observation.fullgraph.message = namer.scrub(observation.fullgraph.message)
    return observation


CASEKIT_FAILED = "casekit's probe failed"  # how a detail starts when the failure is casekit's, not the script's


def casekit_failure(runs: dict[str, Any]) -> str | None:
    """The probe's own failure in one of the runs (its code around the script raised), in one line, or None."""
    for mode, run in runs.items():
        if isinstance(run, dict) and run.get("status") == "probe_failed":
            error: dict[str, Any] = run.get("probe_error") or {}  # the schema checked its shape
            said = f"{error.get('type', 'Exception')}: {error_headline(str(error.get('message') or ''))}"
            where = f" at {error['where']}" if isinstance(error.get("where"), str) else ""
            return f"{CASEKIT_FAILED} in the {mode} run{where}, not the script: {said[:300]} (a casekit bug: please report it)"
    return None


def _graphless_breaks(breaks: list[Site], script_source: str) -> int:
    """Breaks that may compile no graph: nothing was traced before them in their frame, because their script
    line is the first statement of its function, or the statement right after another break (where that
    break's resume function starts)."""
    if not script_source:
        return 0
    first = first_statement_lines(script_source)
    statements = statement_lines(script_source)
    anchors = {(b.anchor.function, b.anchor.line) for b in breaks}
    graphless = 0
    for function, line in anchors:
        earlier = [s for s in statements if s < line]
        after_break = bool(earlier) and (function, max(earlier)) in anchors
        graphless += line in first or after_break
    return graphless


def _lacks(run: dict[str, Any] | None) -> str | None:
    """The dotted name the probe found missing in the exception that ended a run (its `lacks`), or None."""
    exception = (run or {}).get("exception") if (run or {}).get("status") == "raised" else None
    lacks = exception.get("lacks") if isinstance(exception, dict) else None
    shaped = r"[\w.]{1,300}|the compiler stance '\w{1,100}'"
    return lacks if isinstance(lacks, str) and re.fullmatch(shaped, lacks) else None


def break_invariant(observation: ScriptObservation, script_source: str = "") -> str | None:
    """A note when the breaks do not add up with the graphs and the fallbacks, rather than a silent guess.

    Every break that does not skip its frame ends a graph and starts a resume function, so a run
    that compiled nothing yet reports ordinary breaks (and no frame fell back) has counted
    something twice or missed a skip; so has one with more distinct break lines than graphs, less
    those that cannot have made one (a break at the first statement of a frame: `script_source` says which).
    """
    if observation.status is not ScriptStatus.OK:
        return None
    breaks = [s for s in observation.sites if s.kind is not SiteKind.SKIP]
    if not breaks:
        return None
    if observation.graphs == 0 and not observation.fallback_frames:
        return f"{len(breaks)} break(s) observed but no graph compiled and no frame fell back: counts may be off"
    making = len(breaks) - _graphless_breaks(breaks, script_source)
    if making > observation.graphs + len(observation.fallback_frames):
        return (
            f"{len(breaks)} break sites but {observation.graphs} graph(s) and "
            f"{len(observation.fallback_frames)} fallback(s): a break may be counted twice"
        )
    return None


def failed_observation(why: str) -> ScriptObservation:
    """The script could not be observed at all: the environment failed."""
    return ScriptObservation(status=ScriptStatus.ENV_FAILED, detail=why)
