"""Capture's pure parts: the gates, timeouts, the path scrubber, included files, provenance."""

from __future__ import annotations

import base64
import hashlib
import math
import subprocess
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.capture import (
    CaptureRequest,
    check_gates,
    check_waivers,
    gates_to_check,
    is_sentinel,
    provenance_of,
    run_capture,
    strip_credentials,
)
from casekit.errors import CasekitError
from casekit.includes import (
    MAX_BINARY_BYTES,
    IncludeError,
    check_include_path,
    check_includes,
    collect_includes,
    embed,
    lay_out,
    missing_includes,
)
from casekit.model import (
    CaptureRecord,
    EntryPoint,
    ErrorInfo,
    Frame,
    Gate,
    OutputCheck,
    Recompile,
    ScriptObservation,
    ScriptStatus,
    Site,
)
from casekit.runners.interface import Runner, TargetSpec
from casekit.scrub import Replacement, Scrubber, machine_paths_in
from casekit.timeouts import REPLAY_FLOOR_S, check_timeout, replay_run_timeout

from .fakes import FIXTURE_SCRIPTS, RecordedRunner, Target


def site(line: int = 9, category: str = "GB0124") -> Site:
    return Site("repro.py", line, "step", "if x.item() > 0:", category, "Unsupported Tensor.item()")


def ran(status: ScriptStatus = ScriptStatus.OK, sites: list[Site] | None = None, **changes) -> ScriptObservation:
    """An observation whose compiled entry point was called twice and compared with eager."""
    fields = {
        "entries": [EntryPoint("step", "repro.py", 5, calls=2)],
        "check": OutputCheck(compared=2, allclose=status is not ScriptStatus.MISMATCH),
        "graphs": 1 + len(sites or []),
        **changes,
    }
    return ScriptObservation(status=status, sites=list(sites or []), **fields)


def gates(observations: dict[str, ScriptObservation], names: dict[str, str] | None = None) -> list[tuple[Gate, str]]:
    return [(f.gate, f.script) for f in check_gates(observations, names)]


# ---------------------------------------------------------------- gates


def test_a_break_and_a_fix_that_removes_it_pass_every_gate():
    assert check_gates({"pre": ran(sites=[site()]), "post": ran()}) == []


def test_eager_failure_names_the_exceptions_last_line():
    error = ErrorInfo("ModuleNotFoundError", "Traceback...\nNo module named 'helper'")
    failures = check_gates({"pre": ScriptObservation(ScriptStatus.EAGER_FAILED, error=error)})
    assert [(f.gate, f.script) for f in failures] == [(Gate.EAGER, "pre")]
    assert "ModuleNotFoundError: No module named 'helper'" in failures[0].line()
    assert "--include" in failures[0].line() and "\n" not in failures[0].line()


def test_timeout_fails_its_own_gate():
    observation = ScriptObservation(ScriptStatus.TIMEOUT, detail="eager baseline: timed out after 3 s")
    assert gates({"pre": observation}) == [(Gate.TIMEOUT, "pre")]


def test_no_compiled_call_fails_even_when_the_script_ran_fine():
    assert gates({"pre": ScriptObservation(ScriptStatus.OK)}) == [(Gate.COMPILED, "pre")]


def test_calls_that_were_never_compared_fail_the_compiled_gate():
    ended_early = ran(sites=[site()], check=OutputCheck(compared=0))
    failures = check_gates({"pre": ended_early})
    assert [f.gate for f in failures] == [Gate.COMPILED] and "0 compared" in failures[0].evidence


def test_a_compile_error_is_a_purpose_even_with_nothing_compared():
    crash = ran(ScriptStatus.COMPILE_ERROR, check=OutputCheck(), error=ErrorInfo("Unsupported", "boom"))
    assert check_gates({"pre": crash}) == [] and not is_sentinel({"pre": crash})


def test_a_clean_pre_fix_alone_is_a_sentinel_and_passes():
    assert check_gates({"pre": ran()}) == [] and is_sentinel({"pre": ran()})
    assert not is_sentinel({"pre": ran(sites=[site()])})
    assert not is_sentinel({"pre": ran(recompiles=[Recompile("step", "repro.py", 5, ["size mismatch"])])})


def test_a_clean_pre_fix_with_a_fix_is_a_sentinel_whose_fix_must_still_match_eager():
    # a version-difference case: clean where captured, the rewrite kept for when the break appears
    assert check_gates({"pre": ran(), "post": ran()}) == [] and is_sentinel({"pre": ran(), "post": ran()})
    assert gates({"pre": ran(), "post": ran(ScriptStatus.MISMATCH)}) == [(Gate.FIX, "post")]


def test_a_fix_that_leaves_the_break_names_the_site_that_remained():
    failures = check_gates({"pre": ran(sites=[site()]), "post": ran(sites=[site()])})
    assert [(f.gate, f.script) for f in failures] == [(Gate.FIX, "post")]
    assert "repro.py:9 in step (GB0124)" in failures[0].evidence


def test_the_same_break_in_fixed_py_is_the_same_break():
    moved_down = Site("fixed.py", 11, "step", "if x.item() > 0:  # still", "GB0124", "Tensor.item()")
    observations = {"pre": ran(sites=[site()]), "post": ran(sites=[moved_down])}
    assert gates(observations, {"pre": "repro.py", "post": "fixed.py"}) == [(Gate.FIX, "post")]
    isolated = Site("repro.py", 3, "<lambda>", "", "GB0124", "Tensor.item()")
    assert gates({"pre": ran(sites=[site()]), "post": ran(sites=[isolated])}) == []


def test_a_fix_must_match_eager():
    failures = check_gates({"pre": ran(sites=[site()]), "post": ran(ScriptStatus.MISMATCH)})
    assert [f.gate for f in failures] == [Gate.FIX] and "mismatch" in failures[0].evidence


def test_a_break_moved_to_another_function_counts_as_a_change():
    elsewhere = Site("repro.py", 12, "helper", "x.item()", "GB0124", "Tensor.item()")
    assert check_gates({"pre": ran(sites=[site(9)]), "post": ran(sites=[elsewhere])}) == []


def test_waivers_keep_named_gates_and_unknown_names_are_refused():
    failures = check_gates({"pre": ScriptObservation(ScriptStatus.OK)})
    assert gates_to_check(failures, ["compiled"]) == [] and gates_to_check(failures, ["all"]) == []
    assert gates_to_check(failures, ["eager"]) == failures
    with pytest.raises(CasekitError, match="not a gate"):
        check_waivers(["speed"])


# ---------------------------------------------------------------- timeouts


@pytest.mark.parametrize("bad", [-1, 0, math.inf, math.nan])
def test_a_timeout_must_be_finite_and_positive(bad: float):
    with pytest.raises(CasekitError, match="finite number of seconds greater than 0") as raised:
        check_timeout(bad)
    assert raised.value.exit_code == 1


def test_replay_bound_comes_from_the_capture_and_can_be_overridden():
    record = CaptureRecord(timeout_s=300.0, run_seconds={"pre.eager": 0.5, "pre.compiled": 12.0})
    assert replay_run_timeout(record, None) == 60.0  # 5 x the slowest run
    assert replay_run_timeout(CaptureRecord(timeout_s=300.0, run_seconds={"pre.eager": 0.1}), None) == REPLAY_FLOOR_S
    assert replay_run_timeout(CaptureRecord(timeout_s=20.0, run_seconds={"pre.eager": 10.0}), None) == 20.0
    assert replay_run_timeout(record, 7.0) == 7.0
    assert replay_run_timeout(None, None) == 300.0  # a bundle from before timeouts were recorded


# ---------------------------------------------------------------- scrubber


def test_scrubber_replaces_known_folders_and_their_left_truncated_tails():
    scrubber = Scrubber(
        [
            Replacement("/tmp/casekit-w8q3ayp9/scripts/item-branch.pre", ""),
            Replacement("/tmp/casekit-w8q3ayp9", "<batch>"),
            Replacement("/home/alice", "~"),
        ]
    )
    # torch's shorten_filename cuts len(commonpath)+1 characters: '/tmp/...' becomes 'mp/...'
    text = "Caused by: if peak > 1.0:  # mp/casekit-w8q3ayp9/scripts/item-branch.pre/repro.py:9 in step"
    assert scrubber.text(text) == "Caused by: if peak > 1.0:  # repro.py:9 in step"
    assert scrubber.text('File "/tmp/casekit-w8q3ayp9/out/x.json"') == 'File "<batch>/out/x.json"'
    assert scrubber.text("at /home/alice/.cache and ome/alice/.cache/x") == "at ~/.cache and ~/.cache/x"
    assert scrubber.text("see ce/x") == "see ce/x"  # a tail too short to tell from text stays
    assert scrubber.text("a pre-fix, the root cause") == "a pre-fix, the root cause"  # ordinary words stay
    assert scrubber.text("left over /tmp/casekit-zz12ab/scripts/a.pre/x.py") == "left over <batch>/scripts/a.pre/x.py"


def test_scrubber_walks_every_field_and_keeps_enums_and_frozen_frames():
    scrubber = Scrubber([Replacement("/tmp/casekit-abcd1234", "<batch>")])
    observation = ScriptObservation(
        ScriptStatus.COMPILE_ERROR,
        detail="compiled run: /tmp/casekit-abcd1234/x",
        error=ErrorInfo("E", "at /tmp/casekit-abcd1234/y", Frame("/tmp/casekit-abcd1234/z.py", 1, "f")),
        stdout_tail="/tmp/casekit-abcd1234/stdout",
    )
    scrubbed = scrubber.walk(observation)
    assert scrubbed.status is ScriptStatus.COMPILE_ERROR
    assert scrubbed.error is not None and scrubbed.error.location is not None
    assert scrubbed.error.location.file == "<batch>/z.py"
    assert machine_paths_in(repr(scrubbed)) == []


# ---------------------------------------------------------------- included files


@pytest.mark.parametrize("bad", ["../x.py", "/etc/passwd", "a/../b.py", ".hidden", "a//b", "a\\b.py", "", "pkg/.git"])
def test_included_paths_are_relative_plain_names(bad: str):
    with pytest.raises(IncludeError):
        check_include_path(bad)
    assert check_include_path("pkg/sub/mod.py") == "pkg/sub/mod.py"


def test_included_files_are_hashed_and_binaries_small():
    text = embed(b"x = 1\n", "helper.py")
    assert text.text == "x = 1\n" and text.sha256 == hashlib.sha256(b"x = 1\n").hexdigest()
    binary = embed(b"\xff\x00\x01", "w.bin")
    assert binary.base64 == base64.b64encode(b"\xff\x00\x01").decode()
    with pytest.raises(IncludeError, match="at most"):
        embed(b"\xff" * (MAX_BINARY_BYTES + 1), "big.bin")
    text.text = "x = 2\n"
    with pytest.raises(IncludeError, match="sha256"):
        check_includes([text])


def test_collect_lay_out_and_missing_includes(tmp_path: Path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("from .inner import VALUE\n")
    (src / "pkg" / "inner.py").write_text("VALUE = 3\n")
    (src / "helper.py").write_text("import pkg\nSCALE = 2\n")
    (src / "config.json").write_text('{"n": 4}')
    script = src / "repro.py"
    source = "import json\nimport helper\nimport torch\nconfig = json.load(open('config.json'))\n"
    script.write_text(source)
    assert missing_includes(script, source, []) == [
        "repro.py imports `helper` from its folder: pass --include helper.py",
        "repro.py reads `config.json` from its folder: pass --include config.json",
    ]
    partial = collect_includes(script, [src / "helper.py", src / "config.json"])
    assert missing_includes(script, source, partial) == ["helper.py imports `pkg` from its folder: pass --include pkg"]
    included = collect_includes(script, [src / "helper.py", src / "config.json", src / "pkg"])
    assert [f.path for f in included] == ["config.json", "helper.py", "pkg/__init__.py", "pkg/inner.py"]
    assert missing_includes(script, source, included) == []
    out = tmp_path / "out"
    lay_out(out, included)
    assert (out / "pkg" / "inner.py").read_text() == "VALUE = 3\n"
    with pytest.raises(IncludeError, match="not inside the script's folder"):
        collect_includes(script, [tmp_path])
    with pytest.raises(IncludeError, match="no such file"):
        collect_includes(script, [src / "nope.py"])


# ---------------------------------------------------------------- provenance


def test_remote_credentials_are_stripped():
    assert strip_credentials("https://user:tok3n@github.com/o/r.git") == "https://github.com/o/r.git"
    assert strip_credentials("git@github.com:o/r.git") == "git@github.com:o/r.git"
    # a clone of a folder of this machine names that folder: only its name goes into a bundle
    assert strip_credentials("/work/main") == "main"
    assert strip_credentials("file:///srv/git/model.git/") == "model.git"


def test_provenance_names_the_repository_never_the_checkout_path(tmp_path: Path):
    repo = tmp_path / "team-repros"
    (repo / "cases").mkdir(parents=True)
    script = repo / "cases" / "repro.py"
    script.write_text("print(1)\n")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    provenance = provenance_of(script)
    assert provenance is not None
    assert (provenance.repo, provenance.path, provenance.dirty) == ("team-repros", "cases/repro.py", False)
    git("remote", "add", "origin", "https://bob:s3cret@example.com/team/repros.git")
    with_remote = provenance_of(script)
    assert with_remote is not None and with_remote.remote == "https://example.com/team/repros.git"
    assert str(tmp_path) not in repr(with_remote)


def test_run_capture_runs_the_asked_interpreter_with_the_allowed_options_and_commits(tmp_path: Path) -> None:
    """The policy `casekit capture` had in the CLI: --python and --allow make the target, --commit is
    refused before anything runs outside a git repository, and commits the new bundle inside one."""
    made: list[TargetSpec] = []

    def factory(spec: TargetSpec) -> Runner:
        made.append(spec)
        return RecordedRunner(spec, Target("2.5.1"), [])

    archive = Archive(tmp_path / "cases")
    archive.root.mkdir()
    request = CaptureRequest(
        script=FIXTURE_SCRIPTS / "breaks.py",
        case_id="breaks",
        python="/opt/py/bin/python",
        allow=["network=host", "env=HF_HOME"],
        commit=True,
    )
    with pytest.raises(CasekitError, match="--commit: .*git"):
        run_capture(request, archive, factory, lambda message: None)
    assert made == [] and not archive.exists("breaks")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    outcome = run_capture(request, archive, factory, lambda message: None)
    assert made == [
        TargetSpec(runner="python", python="/opt/py/bin/python", options=(("network", "host"), ("env", "HF_HOME")))
    ]
    assert outcome.path == archive.path_for("breaks") and outcome.path.is_file() and outcome.case.id == "breaks"
    assert outcome.committed is not None and outcome.committed.endswith(f"capture breaks: {outcome.case.title}")
    tracked = subprocess.run(["git", "-C", str(tmp_path), "ls-files"], capture_output=True, text=True, check=True)
    assert tracked.stdout.split() == ["cases/breaks.toml"]
    request.allow, request.force, request.commit = ["network"], True, False
    with pytest.raises(CasekitError, match="--allow takes KEY=VALUE, not 'network'"):
        run_capture(request, archive, factory, lambda message: None)
