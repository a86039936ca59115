"""Reason normalization: one release-independent category per kind of graph break.

PyTorch rewords its messages between releases (2.5.1 says `Tensor.item`, 2.13
says `Unsupported Tensor.item() call with capture_scalar_outputs=False` and gives
it id GB0124; 2.5.1 has no ids at all). A classifier that compares strings calls
an unchanged break "gone + new". So the category is the graph-break id:

1. an id printed in the message (2.9+: `.../gb/gb0124.html`);
2. else the gb_type text looked up in the registry, every historical wording
   included (2.7-2.8 print the gb_type but no link);
3. else a legacy pattern (releases before the registry) mapped to the id the
   same break has today;
4. else a normalized form of the legacy text (`legacy:...`), stable enough to
   compare a release with itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

GB_LINK = re.compile(r"/gb/gb(\d{4})\.html", re.IGNORECASE)

# Legacy (pre-registry) wordings -> today's graph-break id. Ordered: first match wins.
LEGACY_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^Tensor\.item\b|call_method .* item\b"), "GB0124"),
    (
        re.compile(
            r"^generic_jump|data.dependent (branching|jump)|jump with|^Dynamic control flow is not supported",
            re.IGNORECASE,
        ),
        "GB0170",
    ),
    (re.compile(r"nn_parameter construction|torch\.nn\.Parameter\(\)` constructor"), "GB0264"),
    (re.compile(r"builtin: print\b|BuiltinVariable\(print\)|builtin operator `?print"), "GB0059"),
    (re.compile(r"^builtin: |call_function BuiltinVariable"), "GB0059"),
    (re.compile(r"torch\._dynamo\.graph_break|graph_break\(\)|skip function graph_break\b"), "GB0025"),
    (re.compile(r"call torch\._dynamo\.disable\(\) wrapped function"), "GB0098"),
    (re.compile(r"^invalid handler args"), "GB0193"),
    (re.compile(r"Tensor\.tolist|to_list", re.IGNORECASE), "GB0109"),
    (re.compile(r"Tensor\.numpy|numpy\(\) with trace_numpy", re.IGNORECASE), "GB0105"),
    (re.compile(r"dynamic shape operator.*no meta", re.IGNORECASE), "GB0037"),
    (re.compile(r"dynamic shape operator|aten\.nonzero|aten\.unique|masked_select", re.IGNORECASE), "GB0036"),
    (re.compile(r"logging\.Logger|Logger method|Logger not supported|call_method.*Logger", re.IGNORECASE), "GB0291"),
    (re.compile(r"copy\.deepcopy|deepcopy", re.IGNORECASE), "GB0179"),
    (re.compile(r"torch\.compiler\.disable|disable\(\)d function|skip_files.*disable", re.IGNORECASE), "GB0098"),
    # 2.5's "inline in skipfiles: f | ..." is an inlining refusal: today's GB0008 "Attempted to inline
    # function marked as skipped" (GB0007 is the call of a skipped function, "skip function X in file Y")
    (re.compile(r"inline in skipfiles|inline function marked as skipped", re.IGNORECASE), "GB0008"),
    (re.compile(r"marked as skipped|skipfiles", re.IGNORECASE), "GB0007"),
    # 2.5's "skip function X in file Y" and "unsupported builtin X" are today's "marked as skipped"
    # (the registry's GB0007 names the function and file); what they name is kept by `named_subject`
    (re.compile(r"^'?skip function \S+ in file "), "GB0007"),
    (re.compile(r"^Graph break due to unsupported builtin "), "GB0007"),
    (re.compile(r"from_numpy", re.IGNORECASE), "GB0231"),
]

# Ids that name the same kind of break in different releases (the registry split
# or renamed them): 2.5's `copy.deepcopy` (GB0179) is 2.13's deepcopy-of-a-tensor.
CATEGORY_ALIASES = {"GB4198": "GB0179"}

ADDRESS = re.compile(r"0x[0-9a-f]+", re.IGNORECASE)
NUMBER = re.compile(r"\b\d+\b")
DIRECTORY = re.compile(r"(?<![\w.])/(?:[^/\s']+/)+")


@dataclass(frozen=True)
class GbInfo:
    """What the registry says about one graph-break id."""

    gb_id: str
    gb_type: str
    explanation: str = ""
    hints: tuple[str, ...] = field(default_factory=tuple)

    @property
    def link(self) -> str:
        return f"https://meta-pytorch.github.io/compile-graph-break-site/gb/{self.gb_id.lower()}.html"


@lru_cache(maxsize=1)
def registry() -> dict[str, GbInfo]:
    """The graph-break registry shipped with casekit (id -> info)."""
    text = resources.files("casekit.data").joinpath("gb_registry.json").read_text()
    ids = json.loads(text)["ids"]
    return {
        gb_id: GbInfo(gb_id, entry["gb_types"][0], entry.get("explanation", ""), tuple(entry.get("hints", [])))
        for gb_id, entry in ids.items()
    }


@lru_cache(maxsize=1)
def _gb_type_index() -> dict[str, str]:
    text = resources.files("casekit.data").joinpath("gb_registry.json").read_text()
    index: dict[str, str] = {}
    for gb_id, entry in json.loads(text)["ids"].items():
        for gb_type in entry["gb_types"]:  # every historical wording maps to the id
            index.setdefault(gb_type.strip(), gb_id)
    return index


def gb_id_from_text(text: str) -> str | None:
    match = GB_LINK.search(text)
    return f"GB{match.group(1)}" if match else None


def gb_id_from_type(gb_type: str) -> str | None:
    return _gb_type_index().get(gb_type.strip())


def legacy_key(reason: str) -> str:
    """A normalized form of a legacy reason that keeps what it names (the function, the file's
    name, the builtin, the method): only addresses, directories and numbers are removed, so two
    different skipped functions never share a key."""
    first = reason.strip().splitlines()[0] if reason.strip() else "unknown"
    first = first.strip().strip("'\"")
    first = ADDRESS.sub("", first)
    first = DIRECTORY.sub("", first)
    first = NUMBER.sub("N", first)
    return "legacy:" + re.sub(r"\s+", " ", first).strip()[:120]


SUBJECTS = [
    re.compile(r"skip function (?P<name>\S+) in file (?:\S*/)?(?P<file>[^/\s']+)"),
    re.compile(r"unsupported builtin (?:None\.)?(?P<name>[\w.]+?)\.?(?:\s|$)"),
    re.compile(r"^builtin: (?P<name>\w+)"),
    re.compile(r"wrapped function <function (?P<name>[\w.<>]+)"),
    re.compile(r"(?:function|builtin|method) `(?P<name>[\w.<>]+)`"),
]


def named_subject(text: str) -> str | None:
    """What a break message names (the skipped function and its file, the builtin, the method), or None.

    Two breaks that name different things are different breaks, whatever their category.
    """
    for pattern in SUBJECTS:
        match = pattern.search(text)
        if match:
            name = match["name"]
            file = match.groupdict().get("file")
            return f"{name} in {file}" if file else name
    return None


def categorize(reason: str, *, gb_id: str | None = None, gb_type: str | None = None) -> tuple[str, str | None]:
    """Return (category, gb_id) for a break reason from any release."""
    gb_id = gb_id or gb_id_from_text(reason)
    if not gb_id and gb_type:
        gb_id = gb_id_from_type(gb_type)
    if not gb_id:
        for line in reason.strip().splitlines()[:3]:
            gb_id = gb_id_from_type(line)
            if gb_id:
                break
    if gb_id:
        return CATEGORY_ALIASES.get(gb_id, gb_id), gb_id
    for pattern, legacy_id in LEGACY_PATTERNS:
        if pattern.search(reason):
            return legacy_id, None
    return legacy_key(reason), None


def describe_category(category: str) -> str:
    """A human name for a category: the registry's gb_type, or the legacy text."""
    info = registry().get(category)
    if info:
        return info.gb_type
    return category.removeprefix("legacy:")


RESUME_PATTERNS = [
    re.compile(r"^torch_dynamo_resume_in_(?P<name>.+?)_at_\d+$"),
    re.compile(r"^resume_in_(?P<name>.+)$"),
    re.compile(r"^<resume in (?P<name>.+)>$"),
]


def normalize_function(name: str) -> str:
    """Strip Dynamo's resume-function names back to the user's function (2.1: `<resume in f>`,
    2.2: `resume_in_f`, 2.3+: `torch_dynamo_resume_in_f_at_12`). Nested resumes unwrap fully."""
    changed = True
    while changed:
        changed = False
        for pattern in RESUME_PATTERNS:
            match = pattern.match(name)
            if match:
                name = match.group("name")
                changed = True
    return name
