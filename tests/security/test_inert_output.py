"""Bundle text is inert wherever casekit shows it: no live Markdown in the report or the step summary,
no control sequence on the terminal.

Markdown: a case's text (title, notes, tags, reasons, break reasons, rollback notes, a results file's
causes) rendered by two CommonMark renderers -- markdown-it-py, and cmark-gfm, the one GitHub runs,
with its autolink, table and strikethrough extensions -- holds no link and no image, and shows the
text as written. Terminal: OSC 52 (clipboard), OSC 8 (hyperlink), CSI, 8-bit C1, carriage returns
and bidi overrides from a title, a file name or a script's output never reach stdout or stderr.
Each attack beside its control: the same text with the sanitiser bypassed does reach the output.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import cmarkgfm
import pytest
import tomli_w
import typer
from cmarkgfm.cmark import Options
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from casekit import progress as progress_module
from casekit import terminal
from casekit.archive.store import Archive
from casekit.cli import common
from casekit.model import ReplayRecord, ScriptRole, ScriptStatus, Severity, SiteClass, SiteVerdict, Verdict
from casekit.replay.document import parse_replay_document
from casekit.report import markdown
from casekit.report import text as text_report
from casekit.report.formats import get_format
from casekit.report.summary import summarize
from casekit.terminal import inert

from ..conftest import ROOT, run_casekit

PIXEL = "http://127.0.0.1:9/pixel.png"  # loopback: nothing leaves the machine even if it rendered
MARKDOWN_ATTACKS = [
    f"![x]({PIXEL})",
    "[release notes](http://127.0.0.1:9/phish)",
    "<http://127.0.0.1:9/auto>",
    "http://127.0.0.1:9/bare",
    "www.example.invalid/x",
    "mail me: someone@example.invalid",
    '<img src="http://127.0.0.1:9/raw.png">',
    "<a href='http://127.0.0.1:9'>raw</a>",
    "[ref]\n\n[ref]: http://127.0.0.1:9/defined",
    "&lt;img src=x&gt; &#x3C;b&#x3E;",
    "@octocat and evil/repo#1 and a/b@deadbeef",
    "$\\href{http://127.0.0.1:9}{math}$ *em* __strong__ ~~gone~~ `tick` | pipe |",
]
PAYLOAD = " ".join(MARKDOWN_ATTACKS)
# What casekit's own Markdown uses; anything else in the rendered HTML came from somebody's text.
CASEKIT_TAGS = {"h2", "h3", "p", "strong", "em", "br", "ul", "li", "code", "blockquote", "details", "summary"}
CASEKIT_TAGS |= {"table", "thead", "tbody", "tr", "th", "td"}


class Tags(HTMLParser):
    """The tags and link targets of rendered HTML, and its text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.targets: list[str] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.targets += [value or "" for name, value in attrs if name in ("href", "src")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def github(source: str) -> str:
    """GitHub's renderer (cmark-gfm with its extensions), raw HTML kept: what it would pass is visible."""
    return cmarkgfm.github_flavored_markdown_to_html(source, options=Options.CMARK_OPT_UNSAFE)


def commonmark(source: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(source)


RENDERERS = {"cmark-gfm (GitHub)": github, "markdown-it (CommonMark)": commonmark}


def hostile_archive_summary(tmp_path: Path) -> Any:
    """The starter tensor-if with the payload in every text field a report shows, a replay history whose
    reasons and sites carry it, and a results document whose reasons, causes, notes and rollback carry it."""
    case = Archive(ROOT / "cases").load("tensor-if")
    case.title = case.notes = case.rollback_notes = case.fix_summary = PAYLOAD
    case.tags = [PAYLOAD]
    case.observations[ScriptRole.PRE].sites[0].reason = PAYLOAD
    case.replays.append(
        ReplayRecord(
            "2099-01-01T00:00:00+00:00", PAYLOAD, PAYLOAD, "venv", Verdict.FIX_BROKEN, Severity.ERROR,
            {ScriptRole.PRE: ScriptStatus.OK, ScriptRole.POST: ScriptStatus.COMPILE_ERROR},
            [SiteVerdict(ScriptRole.POST, SiteClass.NEW, PAYLOAD, PAYLOAD)], reasons=[PAYLOAD],
        )
    )  # fmt: skip
    document = json.loads((ROOT / "tests" / "fixtures" / "report" / "replay-torch-2.5.1.json").read_text())
    result = next(r for r in document["results"] if r["case"] == "tensor-if")
    result["reasons"].append(PAYLOAD)
    result["severity"], result["verdict"] = "error", "fix_broken"
    result["rollback"] = {"needed": True, "verified": False, "detail": PAYLOAD, "notes": PAYLOAD, "path": None}
    for script in result["scripts"].values():
        script["notes"].append(PAYLOAD)
        for site in script["sites"]:
            site.update({"class": "new", "note": PAYLOAD, "axis": "torch", "cause": PAYLOAD})
    document["targets"][0]["torch"] = PAYLOAD
    return summarize([case], [("results.json", parse_replay_document(document, "results.json"))])


def bypass_markdown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sanitiser off: bundle text goes into the Markdown as it is (one line, as before)."""
    monkeypatch.setattr(markdown, "md", lambda text, limit=200: " ".join(str(text).split())[:limit])


@pytest.mark.parametrize("renderer", RENDERERS)
@pytest.mark.parametrize("protected", [True, False], ids=["escaped", "control-unescaped"])
def test_the_markdown_report_renders_no_link_or_image_from_bundle_text(
    renderer: str, protected: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not protected:
        bypass_markdown(monkeypatch)
    source = get_format("md").render(hostile_archive_summary(tmp_path))["report.md"]
    html = Tags(RENDERERS[renderer](source))
    if not protected:  # the control: the attack works when the text is not escaped
        assert {"img", "a"} <= html.tags and PIXEL in html.targets, html.tags
        return
    assert not (html.tags - CASEKIT_TAGS), html.tags - CASEKIT_TAGS
    assert html.targets == []
    shown = " ".join("".join(html.text).split())
    assert f"![x]({PIXEL})" in shown and "www.example.invalid/x" in shown  # the text is still there, as written


MARKDOWN_ALPHABET = st.sampled_from(
    [
        *"\\`*_~[]()!<>&|:@#$\"'=-+.;/ \nabwW01",
        "www.",
        "http://",
        "mailto:",
        "&amp;",
        "<!--",
        "-->",
        "\t",
        "@a.b",
        "1. ",
        "---",
    ]
)
CONTEXTS = {  # where casekit puts bundle text: (template, the tags the template itself makes)
    "paragraph": ("{}", {"p"}),
    "heading": ("## {}", {"h2"}),
    "list item": ("- x: {}\n  - {}", {"ul", "li", "p"}),
    "quote": ("> warning: {}", {"blockquote", "p"}),
    "table cell": ("| a | b |\n|---|---|\n| **{}**<br>{} | c |", {"table", "thead", "tbody", "tr", "th", "td", "br", "strong"}),
}  # fmt: skip


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(MARKDOWN_ALPHABET, max_size=40).map("".join), st.sampled_from(sorted(CONTEXTS)))
def test_md_makes_any_text_inert_in_every_context_casekit_uses(text: str, context: str) -> None:
    """The general rule: whatever the text, rendered where casekit puts it, it adds no tag and shows as written."""
    template, tags = CONTEXTS[context]
    source = template.format(*[markdown.md(text) or "—"] * template.count("{}"))  # as casekit fills an empty one
    expected = " ".join(text.split())
    for render in RENDERERS.values():
        html = Tags(render(source))
        assert html.tags <= tags, (text, context, html.tags)
        assert expected in " ".join("".join(html.text).split()).replace("\u2026", ""), (text, context, source)


# ----------------------------------------------------------------------------------------- terminal

# One of each: OSC 52 (BEL), OSC 8 (ST), 8-bit CSI and OSC, DCS, CSI, a bare ESC sequence, CR, BS, NUL,
# DEL, a lone C1, every bidi override and isolate.
TERMINAL_ATTACKS = {
    "osc52-clipboard": "\x1b]52;c;ZWNobyBwd25lZA==\x07",
    "osc8-hyperlink": "\x1b]8;;http://127.0.0.1:9/x\x1b\\click\x1b]8;;\x1b\\",
    "csi-8bit": "\x9b2J",
    "osc-8bit": "\x9d52;c;eA==\x9c",
    "dcs": "\x1bPq#0;2;0;0;0\x1b\\",
    "csi-clear": "\x1b[2J\x1b[H",
    "sgr-conceal": "\x1b[8m",
    "esc-charset": "\x1b(0",
    "carriage-return": "safe\roverwritten",
    "backspace-nul-del": "a\x08\x00\x7f",
    "c1": "\x85\x8d",
    "bidi": "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
}
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("name", TERMINAL_ATTACKS)
def test_inert_removes_each_control_sequence(name: str) -> None:
    attack = f"before {TERMINAL_ATTACKS[name]} after"
    assert CONTROL.search(attack)  # the control: the raw attack holds a control
    cleaned = inert(attack)
    assert not CONTROL.search(cleaned), repr(cleaned)
    assert cleaned.startswith("before ") and cleaned.endswith(" after")
    assert "52;c" not in cleaned and "ZWNo" not in cleaned and "127.0.0.1" not in cleaned  # payloads go too


@settings(max_examples=500, database=None)
@given(st.lists(st.characters(codec="utf-8") | st.sampled_from(list(TERMINAL_ATTACKS.values()))).map("".join))
def test_inert_leaves_no_control_and_keeps_text(text: str) -> None:
    cleaned = inert(text)
    assert not CONTROL.search(cleaned)
    assert inert(cleaned) == cleaned
    if not CONTROL.search(text):  # nothing to remove: text, newlines and tabs stay as they are
        assert cleaned == text


HOSTILE_LINE = "title " + "".join(TERMINAL_ATTACKS.values()) + " end"


def bypass_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sanitiser off, wherever a module holds it."""
    for module in (terminal, progress_module, text_report):
        for name, off in (("inert", lambda text: text), ("one_line", lambda text: text)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, off)


class Terminal(io.StringIO):
    """What a terminal would receive (isatty: rich draws its bars)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("protected", [True, False], ids=["sanitised", "control-bypassed"])
def test_every_writer_of_the_cli_goes_through_the_sanitiser(protected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """typer.echo, sys.stdout.write, the error and notice lines, plain progress and rich's bars on a terminal."""
    if not protected:
        bypass_terminal(monkeypatch)
    out, err = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    terminal.install()
    typer.echo(HOSTILE_LINE)
    sys.stdout.write(HOSTILE_LINE + "\n")
    common.notice(HOSTILE_LINE)
    common.progress(HOSTILE_LINE)
    print(text_report.table(["title"], [[HOSTILE_LINE]]))
    with pytest.raises(typer.Exit):
        common.fail(HOSTILE_LINE)
    plain = progress_module.ProgressView(sys.stderr, plain=True)
    plain(f"[python:{HOSTILE_LINE}] 1/2 done")
    for width in (None, 200):
        with monkeypatch.context() as m:
            m.setattr(progress_module, "terminal_width", lambda stream, w=width: w)
            m.setattr(progress_module, "plain_output", lambda stream: False)
            with progress_module.ProgressView.for_stderr() as bars:
                bars(f"[python:{HOSTILE_LINE}] importing torch …")
                bars(f"[python:{HOSTILE_LINE}] 1/2 {HOSTILE_LINE}")
                bars(f"[python:{HOSTILE_LINE}] {HOSTILE_LINE}")
                bars("[link=http://link.invalid/]rich markup[/link] building …")  # rich would make it OSC 8
                bars("[link=http://link.invalid/]rich markup[/link] done")
    printed = out.getvalue() + err.getvalue()
    assert printed.count("title ") >= 10, printed  # every writer wrote
    if not protected:
        assert "\x1b]52;c;ZWNobyBwd25lZA==\x07" in printed and "\u202e" in printed
        return
    assert not CONTROL.search(out.getvalue()), repr(CONTROL.search(out.getvalue()))
    # stderr holds rich's bars, drawn with its own CSI codes and carriage returns: none of the attack's
    osc_c1_bidi = re.compile("\x1b[\\]P(]|[\x00\x08\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
    assert not osc_c1_bidi.search(printed), repr(osc_c1_bidi.search(printed))
    for attack in ("52;c", "127.0.0.1", "\x1b[2J", "\x1b[H", "\x1b[8m", "safe\r"):
        assert attack not in printed, attack
    assert "safeoverwritten" in printed and "\x1b[" in err.getvalue()  # the text stays; rich still draws


def test_no_writer_goes_around_the_sanitiser() -> None:
    """A new terminal writer joins this list or writes through sys.stdout/sys.stderr: the probe and the
    sandbox launcher run in other processes and print nothing here."""
    around = re.compile(r"sys\.__std(out|err)__|os\.write\(\s*[12]\b|/dev/tty|Console\(|\.buffer\.write")
    allowed = {
        (
            "casekit/progress.py",
            "console = Console(file=raw_stream(self.stream), force_terminal=True, width=self.width)",
        )
    }
    found = set()
    for path in sorted((ROOT / "casekit").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in ("casekit/probe.py", "casekit/runners/sandbox_launcher.py"):
            continue
        for line in path.read_text().splitlines():
            if around.search(line):
                found.add((relative, line.strip()))
    assert found == allowed, found - allowed


def hostile_terminal_archive(tmp_path: Path) -> Path:
    archive = tmp_path / "cases"
    archive.mkdir()
    data = tomllib.loads((ROOT / "cases" / "tensor-if.toml").read_text())
    data["title"] = data["notes"] = HOSTILE_LINE
    data["tags"] = [HOSTILE_LINE]
    (archive / "tensor-if.toml").write_text(tomli_w.dumps(data))
    (archive / f"{TERMINAL_ATTACKS['osc52-clipboard']}x.toml").write_text(tomli_w.dumps(data))  # a file name
    return archive


# The same command with the sanitiser off (the control): main() without install, the table's cells raw.
BYPASSED = (
    "import sys, casekit.terminal as t, casekit.report.text as r; t.install = lambda: None; "
    "r.one_line = lambda s: s; from casekit.cli import main; sys.argv[0] = 'casekit'; main()"
)


@pytest.mark.process
@pytest.mark.parametrize(
    "command", [["list"], ["show", "tensor-if"], ["validate"], ["show", "tensor-if", "--json", "-"]]
)
def test_list_show_validate_print_no_control_sequence(command: list[str], tmp_path: Path) -> None:
    archive = hostile_terminal_archive(tmp_path)
    done = run_casekit(*command, "--archive", str(archive), timeout=120)
    printed = done.stdout + done.stderr
    assert "Traceback" not in printed and "tensor-if" in printed, printed[-2000:]
    assert not CONTROL.search(printed), repr(CONTROL.search(printed))
    control = subprocess.run(
        [sys.executable, "-c", BYPASSED, *command, "--archive", str(archive)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    raw = control.stdout + control.stderr
    if command[-1] != "-":  # JSON escapes controls itself (\u001b): nothing raw even without the sanitiser
        assert "\x1b]52;c;" in raw, raw[-2000:]


SCRIPT_ATTACK = """import torch
print("\\x1b]52;c;ZWNobyBwd25lZA==\\x07 \\x1b]8;;http://127.0.0.1:9/x\\x1b\\\\click\\x1b]8;;\\x1b\\\\ \\u202eevil")
raise RuntimeError("eager fails \\x1b]52;c;ZWNobyBwd25lZA==\\x07 \\x9b2J \\u202eevil")
"""


@pytest.mark.process
def test_a_replay_prints_no_control_sequence_from_a_script(tmp_path: Path) -> None:
    """Real torch: a script whose output and error hold OSC 52, OSC 8, 8-bit CSI and a bidi override.
    The replay's lines (progress, table, reasons) carry none; its JSON keeps the raw text (the control:
    printed without the sanitiser, the replay's own text rendering holds the payload)."""
    from casekit.bundle import sha256_text
    from casekit.replay.document import read_replay_document
    from casekit.report.text import replay_document_text

    archive = tmp_path / "cases"
    archive.mkdir()
    data = tomllib.loads((ROOT / "cases" / "tensor-if.toml").read_text())
    data["scripts"]["pre"].update(source=SCRIPT_ATTACK, sha256=sha256_text(SCRIPT_ATTACK))
    (archive / "tensor-if.toml").write_text(tomli_w.dumps(data))
    out = tmp_path / "replay.json"
    done = run_casekit("-v", "replay", "--archive", str(archive), "--no-record", "--json", str(out), timeout=600)
    printed = done.stdout + done.stderr
    assert "Traceback" not in printed and "tensor-if" in printed, printed[-3000:]
    assert "eager fails" in printed, printed[-3000:]  # the script's error is shown, as text
    assert not CONTROL.search(printed), repr(CONTROL.search(printed))
    raw = replay_document_text(read_replay_document(out), verbose=True)  # what would print, unsanitised
    assert "\x1b]52;c;" in raw and "\u202e" in raw


@pytest.mark.process
def test_a_repositorys_test_command_reaches_the_terminal_inert(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """bisect-commits --exit-code runs the repository's own command: its output is someone else's text."""
    from casekit.bisect.commits import GOOD, run_command_outcome

    hostile = "print('\\x1b]52;c;ZXZpbA==\\x07\\x1b]8;;http://127.0.0.1:9/\\x07click\\x1b]8;;\\x07 done')"
    command = [sys.executable, "-c", hostile]
    assert "\x1b]52" in subprocess.run(command, capture_output=True, text=True).stdout  # control: it is there raw
    assert run_command_outcome(command, tmp_path, timeout=60) == GOOD
    seen = capfd.readouterr()
    assert "click done" in seen.err and "\x1b" not in seen.err + seen.out
