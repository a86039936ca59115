"""The plain data casekit passes along capture -> bundle -> replay -> classify -> report.

Everything here is a dataclass of plain values, so the core stays pure and the
bundle is a direct TOML rendering of these types (see `bundle.py`).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, assert_never


class ScriptStatus(enum.StrEnum):
    """How one script ended, above its sites."""

    OK = "ok"
    EAGER_FAILED = "eager_failed"  # the script fails without compile: not a compiler problem
    COMPILE_ERROR = "compile_error"  # eager runs, compiled run crashes
    MISMATCH = "mismatch"  # compiled outputs differ from eager
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # killed by a signal, os._exit(non-zero), probe failure
    ENV_FAILED = "env_failed"  # the target environment could not run it at all
    UNOBSERVED = "unobserved"  # it uses what this release lacks (an API, a config name, a stance): nothing to see


class SiteClass(enum.StrEnum):
    """What happened to one graph break between the record and a replay."""

    PERSISTS = "persists"
    MOVED = "moved"
    GONE = "gone"
    REAPPEARED = "reappeared"
    NEW = "new"
    UNOBSERVED = "unobserved"  # recorded, but the script did not run far enough to tell (not gone)


def attention_rank(site_class: SiteClass) -> int:
    """Where a site class comes in every report's list: what needs attention first, never alphabetical."""
    match site_class:
        case SiteClass.NEW:
            return 0
        case SiteClass.REAPPEARED:
            return 1
        case SiteClass.MOVED:
            return 2
        case SiteClass.GONE:
            return 3
        case SiteClass.PERSISTS:
            return 4
        case SiteClass.UNOBSERVED:
            return 5
        case _:
            assert_never(site_class)


SITE_CLASS_ORDER = tuple(sorted(SiteClass, key=attention_rank))


class ScriptRole(enum.StrEnum):
    """Which script of a case: the repro (pre-fix) or the fixed one (post-fix)."""

    PRE = "pre"
    POST = "post"

    @property
    def label(self) -> str:
        """'pre-fix' / 'post-fix': the script as reports name it."""
        match self:
            case ScriptRole.PRE:
                return "pre-fix"
            case ScriptRole.POST:
                return "post-fix"
            case _:
                assert_never(self)


class SiteKind(enum.StrEnum):
    """A graph break, or a break that made Dynamo skip the whole frame."""

    BREAK = "break"
    SKIP = "skip"


class Verdict(enum.StrEnum):
    """One case on one target, in a word; VERDICT_ORDER lists them worst first."""

    FIX_BROKEN = "fix_broken"
    REGRESSED = "regressed"
    ENV_FAILED = "env_failed"
    CHANGED = "changed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    UNOBSERVED = "unobserved"  # nothing could be observed: the scripts use what this release lacks


VERDICT_ORDER = tuple(Verdict)


class Severity(enum.StrEnum):
    """error = functional, warn = performance, info = nothing to act on."""

    INFO = "info"
    WARN = "warn"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """0 info, 1 warn, 2 error: what --fail-on and "the worst result" compare."""
        match self:
            case Severity.INFO:
                return 0
            case Severity.WARN:
                return 1
            case Severity.ERROR:
                return 2
            case _:
                assert_never(self)


class FullgraphStatus(enum.StrEnum):
    """How the fullgraph=True run ended: one graph, or an error (the first break, or a compile error)."""

    OK = "ok"
    ERROR = "error"


class Gate(enum.StrEnum):
    """What a capture must have observed to be a case (see `capture.check_gates`)."""

    EAGER = "eager"  # the eager baseline ran
    COMPILED = "compiled"  # a compiled entry point was called (and compared with eager)
    TIMEOUT = "timeout"  # no run timed out
    FIX = "fix"  # the post-fix removes or changes what the pre-fix showed, and matches eager


@dataclass(frozen=True)
class Frame:
    """One user frame: file (script name or package-relative path), line, function, source text."""

    file: str
    line: int
    function: str
    source: str = ""

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Site:
    """One graph break: where it happens and what it is, normalized across releases."""

    file: str
    line: int
    function: str
    source: str
    category: str  # release-independent identity of the reason (a GB id, or a legacy key)
    reason: str  # the release's own wording (gb_type or legacy reason)
    gb_id: str | None = None
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    call_site: Frame | None = None  # innermost frame in the script that led here
    stack: list[Frame] = field(default_factory=list)
    kind: SiteKind = SiteKind.BREAK
    count: int = 1
    excerpt: str = ""
    sources: list[str] = field(default_factory=list)  # which observations saw it: log, trace, reasons

    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def anchor(self) -> Frame:
        """The script line this break belongs to (itself when it is in the script)."""
        return self.call_site or Frame(self.file, self.line, self.function, self.source)


@dataclass
class Recompile:
    """A guard failure that made Dynamo compile a frame again (kept apart from breaks)."""

    function: str
    file: str
    line: int
    reasons: list[str] = field(default_factory=list)


@dataclass
class FallbackFrame:
    """A function Dynamo gave up on entirely: it runs eager with no graph at all."""

    function: str
    file: str
    line: int
    reason: str = ""


@dataclass
class TensorInput:
    """One tensor argument as fields a reader or a tool can filter on (beside the compact text)."""

    position: str  # "0", "1.2" (nested), "kw:mask"
    dtype: str  # "float32"
    shape: list[int]
    device: str
    dynamic_dims: list[int] = field(default_factory=list)  # dims marked dynamic (symbolic) on the input
    strides: list[int] = field(default_factory=list)
    contiguous: bool | None = None
    requires_grad: bool = False


@dataclass
class CallInfo:
    """One call of a compiled entry point: what went in, how long it took."""

    entry: str
    index: int
    inputs: list[str]  # "f32[8, 8] cpu", "int", ...
    seconds: float
    tensors: list[TensorInput] = field(default_factory=list)  # structured form of the tensor inputs


@dataclass
class EntryPoint:
    """A function or module handed to torch.compile, with its timings."""

    name: str
    file: str
    line: int
    calls: int
    first_call_s: float | None = None  # includes Dynamo tracing (compile time)
    steady_s: float | None = None  # median of later calls
    eager_first_s: float | None = None
    eager_steady_s: float | None = None
    fullgraph_requested: bool = False


@dataclass
class OutputCheck:
    """Compiled outputs against eager outputs, over every call."""

    compared: int = 0
    allclose: bool | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""


@dataclass
class ErrorInfo:
    """An exception that ended a run, with the user location that matters."""

    type: str
    message: str
    location: Frame | None = None


@dataclass
class ScriptObservation:
    """Everything observed for one script on one environment."""

    status: ScriptStatus
    detail: str = ""
    graphs: int = 0
    sites: list[Site] = field(default_factory=list)
    fallback_frames: list[FallbackFrame] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    entries: list[EntryPoint] = field(default_factory=list)
    calls: list[CallInfo] = field(default_factory=list)
    check: OutputCheck = field(default_factory=OutputCheck)
    error: ErrorInfo | None = None  # compile_error / eager_failed / crashed details
    fullgraph: ErrorInfo | None = None  # the first break as an error under fullgraph=True
    fullgraph_status: FullgraphStatus | None = None  # None: not run
    eager_wall_s: float | None = None
    compiled_wall_s: float | None = None
    timing_load: str | None = None  # "parallel:N": timings taken with N runs at once (None: one at a time)
    packages: dict[str, str] = field(default_factory=dict)
    log_excerpt: str = ""
    stdout_tail: str = ""

    def compile_s(self) -> float | None:
        """The first calls' time over the compiled entry points (compile and first run), as a replay keeps it;
        None when no first call was timed."""
        firsts = [entry.first_call_s for entry in self.entries if entry.first_call_s is not None]
        return round(sum(firsts), 4) if firsts else None


@dataclass
class ScriptSource:
    """A script embedded in a bundle."""

    name: str
    sha256: str
    source: str


@dataclass
class IncludedFile:
    """A file laid out beside the scripts (a helper module, a small config), embedded in the bundle."""

    path: str  # relative to the script's folder, '/'-separated, every component a safe name
    sha256: str  # of the raw bytes
    text: str | None = None  # utf-8 content, or
    base64: str | None = None  # small binary content


@dataclass
class CaptureRecord:
    """How a case was captured: the bound its runs had, what they took, which gates were waived."""

    timeout_s: float | None = None  # the capture --timeout
    run_seconds: dict[str, float] = field(default_factory=dict)  # "pre.eager" -> wall seconds observed
    sentinel: bool = False  # the pre-fix compiles cleanly: the case alerts when a break appears
    waived_gates: list[Gate] = field(default_factory=list)  # gates that failed and were kept on purpose

    def mark(self) -> str:
        """'sentinel' / 'waived: eager, fix': how the case was kept, shown wherever it is listed."""
        marks = ["sentinel"] if self.sentinel else []
        if self.waived_gates:
            marks.append("waived: " + ", ".join(self.waived_gates))
        return "; ".join(marks)


@dataclass
class Provenance:
    """Where a repro came from when captured inside a git checkout (never a host path)."""

    repo: str | None = None  # the repository's folder name when it has no remote
    remote: str | None = None
    commit: str | None = None
    dirty: bool | None = None
    path: str | None = None


@dataclass
class SiteVerdict:
    """One site's class in one replay (the compact form kept in a bundle's history)."""

    script: ScriptRole
    site_class: SiteClass
    where: str  # "repro.py:6"
    category: str


@dataclass
class ReplayRecord:
    """One replay of a case on one target, appended to the bundle's history."""

    at: str  # ISO timestamp
    target: str
    torch: str
    runner: str
    verdict: Verdict
    severity: Severity
    statuses: dict[ScriptRole, ScriptStatus]
    sites: list[SiteVerdict] = field(default_factory=list)
    observed: dict[ScriptRole, list[str]] = field(default_factory=dict)  # "file:line|category" keys seen
    reasons: list[str] = field(default_factory=list)  # why the verdict, in a line each
    graphs: dict[ScriptRole, int] | None = None  # graph count (the report's timeline charts them)
    compile_s: dict[ScriptRole, float] | None = None  # first-call seconds summed over entry points
    timing_load: str | None = None  # "parallel:N" when compile_s was measured beside other runs
    # the frames that fell back to eager entirely, "fn (file:line)" per script (the report's timeline rows)
    fallbacks: dict[ScriptRole, list[str]] | None = None
    perf: list[PerfRecord] | None = None  # replay --perf --record: each script timed in that run, and its verdicts


SettingValue = bool | int | float | str  # a Dynamo setting's value as the probe records it (others by repr)


@dataclass
class DynamoSettingRecord:
    """One Dynamo setting as a release had it: its value in the run, its default, whether the run set it."""

    value: SettingValue | None = None  # None: TOML has no null, so a None value is left out
    default: SettingValue | None = None
    set: bool = False
    alias_of: str | None = None  # an old name kept for a new one: the new name's entry carries it


@dataclass
class RecordedEnvironment:
    """The keys of a bundle's `environment` table that casekit writes and reads, with their types.

    The table stays a plain dict on `Case` (a newer casekit may record more); the loader checks every
    key named here against its type, so a reader may take `environment["torch"]` as a string."""

    torch: str | None = None
    torch_git: str | None = None
    torch_cuda: str | None = None
    python: str | None = None
    os: str | None = None
    machine: str | None = None
    cpu_count: int | None = None
    numpy: str | None = None
    triton: str | None = None
    cudnn: int | None = None
    cuda_available: bool | None = None
    cuda_initialized_before_fork: bool | None = None
    gpus: list[str] = field(default_factory=list)
    driver: str | None = None
    note: str | None = None
    runner: str | None = None
    label: str | None = None
    sandbox: str | None = None
    image: str | None = None
    image_id: str | None = None
    image_tags: list[str] = field(default_factory=list)
    image_labels: dict[str, str] = field(default_factory=dict)
    env_key: str | None = None
    installer: str | None = None
    torch_file: str | None = None
    channel: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    dynamo_settings: dict[str, DynamoSettingRecord] = field(default_factory=dict)


# The tag of a case imported from a log (`casekit import`): no repro yet, its script only raises.
DRAFT_TAG = "draft"


@dataclass
class Case:
    """One triaged graph-break problem: the unit the archive holds."""

    id: str
    title: str
    pre: ScriptSource
    post: ScriptSource | None = None
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    fix_summary: str = ""
    rollback_notes: str = ""
    created: str = ""
    backend: str = "eager"
    environment: dict[str, Any] = field(default_factory=dict)
    observations: dict[ScriptRole, ScriptObservation] = field(default_factory=dict)
    provenance: Provenance | None = None
    replays: list[ReplayRecord] = field(default_factory=list)
    includes: list[IncludedFile] = field(default_factory=list)  # laid out beside pre and post scripts
    capture: CaptureRecord | None = None
    # capture --perf: the scripts timed on the capture's target, figures only: context, never a baseline
    perf: list[PerfRecord] = field(default_factory=list)
    schema_version: int = 1

    def script(self, which: ScriptRole) -> ScriptSource | None:
        match which:
            case ScriptRole.PRE:
                return self.pre
            case ScriptRole.POST:
                return self.post
            case _:
                assert_never(which)


def to_plain(value: Any) -> Any:
    """Dataclasses/enums -> dicts/strings, dropping None (TOML has no null)."""
    if hasattr(value, "__dataclass_fields__"):
        return {k: to_plain(v) for k, v in asdict(value).items() if v is not None}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


# ------------------------------------------------------------------ performance (replay --perf, capture --perf)


class PerfAxis(enum.StrEnum):
    """What a performance verdict is about: compile time with empty or filled caches, the compiled call's
    time once compiled, and its speed-up over the same call run eagerly (the machine's drift cancels there)."""

    COMPILE_COLD = "compile_cold"
    COMPILE_WARM = "compile_warm"
    STEADY = "steady"
    SPEEDUP = "speedup"


class PerfVerdict(enum.StrEnum):
    """Slower and faster are called only when the change is significant, at least its threshold and above
    the A/A noise floor; same when it is clearly within the threshold; else inconclusive."""

    SLOWER = "slower"
    SAME = "same"
    FASTER = "faster"
    INCONCLUSIVE = "inconclusive"


@dataclass
class Spread:
    """One figure over fresh processes: the median of the per-process values, their lowest and highest."""

    median: float
    low: float
    high: float
    n: int


@dataclass
class PerfStructure:
    """What explains a timing, deterministic: graphs and their operators, breaks by id, recompiles."""

    graphs: int = 0
    ops_per_graph: list[int] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)  # "GB0124 at repro.py:6", sorted
    recompiles: int = 0
    eager_frames: list[str] = field(default_factory=list)  # frames that ran eagerly entirely
    guards: int | None = None  # guards over every frame compiled, where the release counts them
    cudagraph_skip: str | None = None


@dataclass
class PerfFigures:
    """One script measured on one target in one run: compile cold and warm, steady state, the phases of a
    cold compile, whether the caches really missed and hit, and the structure."""

    target: str
    script: ScriptRole
    processes: dict[str, int] = field(default_factory=dict)  # "cold"/"warm" -> fresh processes measured
    compile_cold_s: Spread | None = None
    compile_warm_s: Spread | None = None
    steady_s: Spread | None = None  # the compiled call, per call
    eager_s: Spread | None = None  # the same call run eagerly, per call
    speedup: Spread | None = None  # eager / compiled, from adjacent blocks of one process
    phases: dict[str, float] = field(default_factory=dict)  # a cold compile's seconds per phase (median)
    caches: str = ""  # "cold missed (3 graphs), warm hit (3 of 3)" or what was not as expected
    instructions: str = ""  # "unavailable: <why>" or the compile's instruction count
    structure: PerfStructure = field(default_factory=PerfStructure)
    steady_unavailable: str = ""  # why no steady state (the entry point cannot be called again)
    threads: int = 1
    load: str = ""  # the host's load average when measured


@dataclass
class PerfAxisResult:
    """One axis judged: the verdict, the change of the target against the baseline (a ratio - 1), the
    p-value and the A/A noise floor it was judged with, and why in a line."""

    axis: PerfAxis
    verdict: PerfVerdict
    change: float | None = None
    p: float | None = None
    floor: float | None = None
    why: str = ""


@dataclass
class PerfComparison:
    """One script of one case on a target against the baseline target, measured side by side in one run."""

    baseline: str
    axes: list[PerfAxisResult] = field(default_factory=list)
    eager_change: float | None = None  # eager's own change: a slower eager is not a compile regression
    explanation: str = ""  # the structural diff that explains it
    cause: str = ""  # the axis that changed it: "torch 2.13.0 → 2.15.0", "library brklib 1.0 → 2.0", a setting


@dataclass
class PerfRecord:
    """One script timed on one target in one run (replay --perf, capture --perf): its figures, and against the
    run's baseline when the run had one. A bundle keeps it as what that run measured: context for a later
    run, never its baseline (a timing from another host or day is not comparable)."""

    script: ScriptRole
    figures: PerfFigures
    comparison: PerfComparison | None = None
    skipped: str = ""  # why this script was not timed on this target
