"""What `--perf` measures and how it judges: how many fresh processes, how the blocks are timed, the
thresholds per axis. One value object, parsed from the flags in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from casekit.errors import CasekitError
from casekit.model import PerfAxis, ScriptRole
from casekit.perf.judge import AxisRule

# The defaults are sized for `replay --perf` of the starter archive on two targets in about 20 minutes on
# 2 cores: a cold compile of a small case costs 15-30 s here, a warm one 1-5 s (2.13.0 against 2.14.1, at
# most 8 rounds of 10 blocks: 1,235 s of timing, 18 cold processes and 57 rounds, 20 min 57 s with the
# replay). Five rounds is the least a verdict can come from: a rank test of 5 processes against the
# baseline's 10 reaches p = 0.00067 at best, 4 against 8 only 0.004, past an axis's alpha of 0.0025. Up
# to 10 where an axis could still settle (compare.wants_more): at 8, a +10 % change seen at p = 0.019
# after 5 rounds would reach 0.003 at best.
COLD, WARM, MAX_WARM = 1, 5, 10
THRESHOLDS = {"steady": 0.05, "compile": 0.15}  # PyTorch's HUD marks 5 %; its regression lambda flags compile at 1.15x
COMPILE_FLOOR_S = 0.05  # a compile change of less than 50 ms is not called, whatever its ratio


@dataclass(frozen=True)
class PerfSettings:
    """`--perf-repeats cold=N,warm=N`, `--perf-threshold steady=5%,compile=15%`, `--perf-scripts pre|post|both`."""

    cold: int = COLD
    warm: int = WARM
    max_warm: int = MAX_WARM
    # Timed blocks per process, and about how long a block of the slower arm lasts. Their noise is the blocks'
    # own: in the +10 % bench (10 blocks of 20 ms), a process's even blocks and odd blocks disagreed as much
    # as processes did (its compiled/eager ratio: 3.1 % against 3.5 % between processes; a round's eager
    # change: 5.4 % against 5.2 %), so more blocks narrow a verdict where more processes (2 s of compile
    # each) cost more. Shorter blocks keep eager and compiled, and one target's block and the next, closer
    # in time, inside the host's slow episodes.
    blocks: int = 20
    block_s: float = 0.015
    threads: int = 1  # torch's threads in the timed blocks (CPU)
    thresholds: dict[str, float] = field(default_factory=lambda: dict(THRESHOLDS))
    # A comparison reads every axis, so its false alarm is any axis called between two identical builds:
    # alpha bounds that (Bonferroni: each of the axes read is tested at alpha / axes_read). Tested at 0.01
    # each, the bench's 100 A/A comparisons called 2, one steady and one warm compile (p 0.0047 and 0.0027).
    alpha: float = 0.01
    axes_read: int = len(PerfAxis)  # bisect reads one axis, and gives it the whole alpha
    scripts: tuple[ScriptRole, ...] = (ScriptRole.PRE,)
    backend: str | None = None  # --backend: every case's, else each case's own (inductor unless it names another)
    budget_s: float | None = None  # the warm rounds a script may add, in seconds

    def rule(self, axis: PerfAxis) -> AxisRule:
        if axis in (PerfAxis.COMPILE_COLD, PerfAxis.COMPILE_WARM):
            return AxisRule(self.thresholds["compile"], self.axis_alpha, floor_abs=COMPILE_FLOOR_S)
        return AxisRule(self.thresholds["steady"], self.axis_alpha, higher_is_better=axis is PerfAxis.SPEEDUP)

    @property
    def axis_alpha(self) -> float:
        """The p-value one axis must be under: the comparison's alpha shared by the axes it reads."""
        return self.alpha / max(1, self.axes_read)


def parse_repeats(text: str, settings: PerfSettings) -> PerfSettings:
    """'cold=3,warm=8,max=12' (any of them) -> the settings with those counts: cold processes a side, warm
    rounds, and the most warm rounds while a verdict is open; CasekitError in one line."""
    values = _pairs(text, "--perf-repeats", ("cold", "warm", "max"))
    counts = {}
    for key, value in values.items():
        if not value.isdigit() or not 0 <= int(value) <= 100 or (key != "cold" and int(value) == 0):
            raise CasekitError(f"--perf-repeats {key}={value!r}: give a count (cold 0-100, warm and max 1-100)")
        counts[key] = int(value)
    warm = counts.get("warm", settings.warm)
    most = counts.get("max", max(settings.max_warm, warm))
    if most < warm:
        raise CasekitError(f"--perf-repeats max={most} is below warm={warm}: max is the most warm rounds")
    return replace(settings, cold=counts.get("cold", settings.cold), warm=warm, max_warm=most)


def parse_thresholds(text: str, settings: PerfSettings) -> PerfSettings:
    """'steady=5%,compile=15%' -> the settings with those thresholds; CasekitError in one line."""
    values = _pairs(text, "--perf-threshold", ("steady", "compile"))
    thresholds = dict(settings.thresholds)
    for key, value in values.items():
        match = re.fullmatch(r"(\d{1,3}(?:\.\d{1,3})?)%", value)
        if not match or not 0 < float(match[1]) < 100:
            raise CasekitError(f"--perf-threshold {key}={value!r}: give a percentage such as 5%")
        thresholds[key] = float(match[1]) / 100
    return replace(settings, thresholds=thresholds)


def parse_scripts(text: str) -> tuple[ScriptRole, ...]:
    """'pre', 'post' or 'both' -> the scripts perf measures; CasekitError in one line."""
    choices = {"pre": (ScriptRole.PRE,), "post": (ScriptRole.POST,), "both": (ScriptRole.PRE, ScriptRole.POST)}
    if text not in choices:
        raise CasekitError(f"--perf-scripts {text!r}: use pre (the repro, with its breaks), post, or both")
    return choices[text]


def _pairs(text: str, flag: str, keys: tuple[str, ...]) -> dict[str, str]:
    if len(text) > 200:
        raise CasekitError(f"{flag}: at most 200 characters")
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in keys:
            raise CasekitError(f"{flag} {item!r}: use {','.join(f'{k}=…' for k in keys)}")
        pairs[key] = value.strip()
    if not pairs:
        raise CasekitError(f"{flag}: give {','.join(f'{k}=…' for k in keys)}")
    return pairs


def settings_from_flags(
    repeats: str | None, thresholds: str | None, scripts: str | None, backend: str | None
) -> PerfSettings:
    """The settings `--perf` and its flags ask for (the defaults where a flag is not given)."""
    settings = PerfSettings(backend=backend)
    if repeats:
        settings = parse_repeats(repeats, settings)
    if thresholds:
        settings = parse_thresholds(thresholds, settings)
    if scripts:
        settings = replace(settings, scripts=parse_scripts(scripts))
    return settings
