"""Classification: pair what a replay observed with what the case recorded, judge it, say whose change it was.

Three steps, each a module of pure functions over plain data: `pairing` (which observed break is which
recorded one: persists / moved / gone / reappeared / new), `judgement` (per script its status and what
changed; per case a verdict and a severity) and `attribution` (torch, a library or a Dynamo setting).
"""

from casekit.classify.attribution import (
    Attribution,
    Axes,
    Difference,
    attribute_changes,
    attributed,
    axes_differences,
    changed_defaults,
    recorded_axes,
    settings_axes,
    unknown_settings,
)
from casekit.classify.judgement import (
    CaseResult,
    Rollback,
    ScriptResult,
    classify_case,
    classify_script,
    describe_fallback,
    functional_failure,
    judge,
    post_fix_broken,
    ran_compiled,
    ran_eager,
    script_ran,
)
from casekit.classify.pairing import SitePairing, match_sites, pair_sites, previously_gone, same_break, site_key

__all__ = [
    "Attribution",
    "Axes",
    "CaseResult",
    "Difference",
    "Rollback",
    "ScriptResult",
    "SitePairing",
    "attribute_changes",
    "attributed",
    "axes_differences",
    "changed_defaults",
    "classify_case",
    "classify_script",
    "describe_fallback",
    "functional_failure",
    "judge",
    "match_sites",
    "pair_sites",
    "post_fix_broken",
    "previously_gone",
    "ran_compiled",
    "ran_eager",
    "recorded_axes",
    "same_break",
    "script_ran",
    "settings_axes",
    "site_key",
    "unknown_settings",
]
