"""`casekit reduce` end to end: real torch, real probes, the real CLI.

A reduction keeps the break's identity and writes only under --out; the result runs standalone;
a multi-file repro reduces every included file; Ctrl-C keeps the best so far; every bad input is one
line before any reduction starts; a candidate that writes outside is held by the sandbox (with a
control showing the same candidate does write when the sandbox is off).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, as_from_a_terminal, run_casekit

SCRIPT = """\
import math
import os
import torch
import torch.nn as nn

HIDDEN = 32


def unused_helper(x):
    return x.cos() * math.pi


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        h = self.norm(self.lin(x))
        scale = h.abs().max().item()
        return h / scale


class Model(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def main():
    model = Model(HIDDEN, 2)
    compiled = torch.compile(model, backend="eager")
    for step in range(3):
        out = compiled(torch.randn(8, HIDDEN))
        print(step, out.shape, os.getpid() > 0)


main()
"""


def code_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def run_alone(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A reduced script run by plain python, torch's graph-break log on (what a user checks by hand)."""
    return subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "TORCH_LOGS": "graph_breaks"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def reduce(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_casekit("reduce", *args, "--jobs", "2", timeout=timeout)


@pytest.mark.process
def test_a_model_is_reduced_keeping_its_break_and_the_result_runs_standalone(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    before = sorted(p.name for p in tmp_path.iterdir())
    archive = tmp_path / "cases"
    done = reduce(
        str(script),
        "--out",
        str(out),
        "--max-time",
        "240",
        "--capture",
        "--archive",
        str(archive),
        "--id",
        "item-scale",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = done.stdout
    assert "reduced model.py:" in summary and "candidates run" in summary
    assert "kept: model.py:21 GB" in summary, summary  # the .item() in Block.forward
    assert "confirmed in a fresh probe" in summary
    # each pass that asks something shows as it starts (this model has no config class: no literals pass)
    for phase in ("whole statements, halves first", "single-use variables", "expressions, arguments, the rest"):
        assert f"reducing {phase}" in done.stderr, done.stderr[-3000:]
    reduced = (out / "model.py").read_text()
    # the same call path through the user's code must stay (main -> Model.forward -> Block.forward)
    assert code_lines(reduced) <= code_lines(SCRIPT) * 0.75, reduced
    assert "unused_helper" not in reduced and ".item()" in reduced
    # nothing beside the script was written: only --out (and the archive --capture filed into)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "out", "cases"])
    # --capture filed the result, its notes naming the original's identity and size
    assert "filed case item-scale" in summary
    bundle = next(archive.rglob("item-scale*.toml")).read_text()
    assert "Reduced by casekit reduce from model.py" in bundle and f"{code_lines(SCRIPT)} lines" in bundle
    assert hashlib.sha256(SCRIPT.encode()).hexdigest()[:16] in bundle
    # standalone: plain python shows the same break in torch's own log
    shown = run_alone(out / "model.py", tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "Graph break" in shown.stderr and "item()" in shown.stderr, shown.stderr[-2000:]


LAYERS = """\
import torch
import torch.nn as nn


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


class Gate(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        score = self.proj(x).sigmoid()
        if score.mean() > 0.5:
            return x * score
        return x


class Unused(nn.Module):
    def forward(self, x):
        return gelu_tanh(x)
"""

MAIN = """\
import torch
from pkg.layers import Gate
from pkg.config import DIM


def run():
    gate = Gate(DIM)
    compiled = torch.compile(gate, backend="eager")
    x = torch.randn(4, DIM)
    for _ in range(2):
        y = compiled(x)
    print(y.shape)


run()
"""


@pytest.mark.process
def test_a_multi_file_repro_reduces_every_included_file(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text(LAYERS)
    (tmp_path / "pkg" / "config.py").write_text("DIM = 16\nDEPTH = 4\nNAME = 'gate'\n")
    (tmp_path / "pkg" / "extra.py").write_text("def never_imported():\n    return 1\n")
    (tmp_path / "main.py").write_text(MAIN)
    out = tmp_path / "out"
    done = reduce(str(tmp_path / "main.py"), "--include", str(tmp_path / "pkg"), "--out", str(out), "--max-time", "240")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kept: pkg/layers.py:16 GB" in done.stdout, done.stdout  # the data-dependent branch on score.mean()
    assert "files 5 -> " in done.stdout
    layers = (out / "pkg" / "layers.py").read_text()
    # `score` is read once: its value is written into the branch, on the branch's own line
    assert "Unused" not in layers and "gelu_tanh" not in layers and ".mean()" in layers
    assert not (out / "pkg" / "extra.py").exists()  # an included file nothing needs is left out
    config = out / "pkg" / "config.py"
    assert not config.exists() or "NAME" not in config.read_text()
    total = sum(code_lines(p.read_text()) for p in out.rglob("*.py"))
    assert total < code_lines(LAYERS + MAIN) * 0.7


PIPELINE = """\
import random
import torch
import torch.nn as nn

VOCAB = ["<pad>", "<cls>"] + [f"w{i}" for i in range(30)]


class Tokenizer:
    def __init__(self, vocab):
        self.index = {word: i for i, word in enumerate(vocab)}

    def encode(self, text, length):
        ids = [1] + [self.index.get(word, 0) for word in text.split()]
        return (ids + [0] * length)[:length]


def documents(count, rng):
    return [" ".join(f"w{rng.randrange(30)}" for _ in range(rng.randrange(3, 9))) for _ in range(count)]


def batches(texts, tokenizer, size):
    for start in range(0, len(texts), size):
        yield torch.tensor([tokenizer.encode(t, 12) for t in texts[start : start + size]])


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB), 8)
        self.out = nn.Linear(8, 3)

    def forward(self, ids):
        hidden = self.embed(ids)
        if hidden.sum() > 0:
            hidden = hidden * 2
        return self.out(hidden)


tagger = torch.compile(Tagger(), backend="eager")
for ids in batches(documents(6, random.Random(0)), Tokenizer(VOCAB), 3):
    print(tagger(ids).shape)
"""


@pytest.mark.process
def test_the_data_pipeline_gives_way_to_literal_inputs_of_the_same_shape_and_dtype(tmp_path: Path) -> None:
    script = tmp_path / "tagger.py"
    script.write_text(PIPELINE)
    out = tmp_path / "out"
    done = reduce(str(script), "--out", str(out), "--max-time", "240")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kept: tagger.py:34 GB" in done.stdout, done.stdout  # the data-dependent branch
    assert "reducing inputs of the compiled call written as literals" in done.stderr
    reduced = (out / "tagger.py").read_text()
    # the tokenizer, the documents and the batching made one (3, 12) int64 tensor: a literal makes it now
    # (its shape shrunk after, its dtype kept)
    assert re.search(r"torch\.(ones|zeros)\(.*dtype=torch\.int64\)", reduced), reduced
    for gone in ("Tokenizer", "documents", "batches", "random"):
        assert gone not in reduced, reduced
    shown = run_alone(out / "tagger.py", tmp_path)
    assert shown.returncode == 0 and "Graph break" in shown.stderr, shown.stderr[-2000:]


# ------------------------------------------------------------ bad input: one line, before any reduction


@pytest.mark.process
@pytest.mark.parametrize(
    ("body", "args", "said"),
    [
        ("import torch\nprint(torch.ones(2))\n", ("--site", "s.py:99"), "--site s.py:99: s.py has 2 lines"),
        ("import torch\nprint(torch.ones(2))\n", ("--site", "other.py:1"), "other.py is not a file being reduced"),
        ("import torch\n\nprint(torch.ones(2))\n", ("--site", "s.py:2"), "line 2 holds no statement"),
        ("import torch\n", ("--gb", "nope"), "a graph-break id looks like GB0124"),
    ],
)
def test_a_bad_choice_is_refused_before_any_run(tmp_path: Path, body: str, args: tuple[str, ...], said: str) -> None:
    (tmp_path / "s.py").write_text(body)
    started = time.monotonic()
    done = reduce(str(tmp_path / "s.py"), "--out", str(tmp_path / "out"), *args)
    assert done.returncode != 0
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("casekit:")]) == 1
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - started < 60  # no torch import, no probe


BAD_SCRIPTS = {
    "eager fails": (
        "import torch\nf = torch.compile(lambda x: x.sum().item(), backend='eager')\nf(torch.ones(2))\n"
        "raise ValueError('broken data')\n",
        (),
        "the script fails without torch.compile",
    ),
    "no break": (
        "import torch\nf = torch.compile(lambda x: x * 2, backend='eager')\nprint(f(torch.ones(2)))\n",
        (),
        "the script shows no graph break",
    ),
    "hangs": ("import time\nwhile True:\n    time.sleep(0.1)\n", ("--timeout", "10"), "did not finish within 10 s"),
    "not the chosen break": (
        "import torch\nf = torch.compile(lambda x: x.sum().item(), backend='eager')\nf(torch.ones(2))\n",
        ("--gb", "GB0999"),
        "the script does not show the break with id GB0999; it breaks at: s.py:2",
    ),
    "not python": ("import torch\ndef f(:\n", (), "s.py"),
}


@pytest.mark.process
@pytest.mark.parametrize("case", list(BAD_SCRIPTS))
def test_a_script_that_cannot_be_reduced_is_one_clear_line(tmp_path: Path, case: str) -> None:
    body, args, said = BAD_SCRIPTS[case]
    (tmp_path / "s.py").write_text(body)
    done = reduce(str(tmp_path / "s.py"), "--out", str(tmp_path / "out"), *args)
    assert done.returncode != 0
    assert said in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.process
def test_a_missing_script_is_one_line(tmp_path: Path) -> None:
    done = reduce(str(tmp_path / "absent.py"), "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and "absent.py" in done.stderr and "Traceback" not in done.stderr


# ------------------------------------------------------------ Ctrl-C


@pytest.mark.process
def test_ctrl_c_keeps_the_best_result_so_far(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "casekit", "reduce", str(script), "--out", str(out), "--jobs", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 400
        normalized = None
        while time.monotonic() < deadline and process.poll() is None:
            written = out / "model.py"
            if written.exists():
                text = written.read_text()
                normalized = normalized or text  # the first write is the original as it was
                if code_lines(text) < code_lines(SCRIPT):
                    break
            time.sleep(0.5)
        assert process.poll() is None, "the reduction ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signal.SIGINT, stderr[-2000:]
    assert f"stopped by Ctrl-C: the best result so far is in {out}" in stdout
    kept = (out / "model.py").read_text()
    assert code_lines(kept) < code_lines(SCRIPT)
    compile(kept, "model.py", "exec")  # whole, never half written
    assert not list(out.glob(".*.tmp"))


# ------------------------------------------------------------ a hostile candidate


def hostile_script(outside: Path) -> str:
    """The original writes to /dev/null; a candidate that drops the second `target = ...` (a statement
    the break does not need: the reducer tries it among its first candidates) writes outside."""
    return f"""\
import torch

target = {str(outside)!r}
target = "/dev/null"


def f(x):
    with open(target, "w") as sink:
        sink.write("a candidate wrote outside the output folder")
    return x * x.sum().item()


print(torch.compile(f, backend="eager")(torch.ones(3)))
"""


@pytest.mark.process
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control-unsandboxed"])
def test_a_candidate_that_writes_outside_is_held_by_the_sandbox(tmp_path: Path, sandboxed: bool) -> None:
    outside = tmp_path / "outside" / "planted.txt"
    outside.parent.mkdir()
    script = tmp_path / "hostile.py"
    script.write_text(hostile_script(outside))
    args = [str(script), "--out", str(tmp_path / "out"), "--max-time", "120", "--no-inputs"]
    done = reduce(*args, *([] if sandboxed else ["--allow", "sandbox=none"]))
    assert done.returncode == 0, done.stderr[-2000:]
    if sandboxed:
        assert not outside.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.py", "out", "outside"]
        assert list(outside.parent.iterdir()) == []
    else:  # the control: the same reduction unsandboxed runs a candidate that writes there (later
        # candidates may have dropped the write() and only truncate it: the file's existence is the escape)
        assert outside.exists()


# ------------------------------------------------------------ the result as written, whatever --jobs

TIDY = """\
\"\"\"A tiny model whose break is three calls deep.\"\"\"

import torch
import torch.nn as nn


class Scale(nn.Module):
    \"\"\"Scales by a learned factor.\"\"\"

    def __init__(self, dim, unused_flag):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, step):
        # BUG: a Python number read from a tensor breaks the graph
        factor = x.abs().max().item()
        return x * self.weight / factor  # normalised


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = Scale(dim, True)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, step):
        h = self.scale(x, step)
        return self.out(h)


def main():
    model = Model(8)
    compiled = torch.compile(model)  # inductor, as the team runs it
    for step in range(3):
        print(step, compiled(torch.randn(4, 8), step).shape)


main()
"""


def _reduce_in_process(tmp_path: Path, jobs: int):  # type: ignore[no-untyped-def]
    from casekit.reduce.run import ReduceRequest, reduce_script
    from casekit.runners.python import PythonRunner
    from casekit.runners.registry import interpreter_target

    script = tmp_path / "tiny.py"
    script.write_text(TIDY)
    request = ReduceRequest(script=script, out=tmp_path / f"out{jobs}", jobs=jobs, max_seconds=1200)
    return reduce_script(request, PythonRunner(interpreter_target()), lambda message: None)


# serial: a candidate's run is bounded in wall-clock time (10 s here), and with two CPU hogs beside this test
# runs side by side were lost (the warm probe died under them: 14 candidates of 301 against 2 on a quiet host)
@pytest.mark.process
@pytest.mark.serial
def test_the_result_passes_the_checklist_and_is_the_same_whatever_the_jobs(tmp_path: Path) -> None:
    from casekit.reduce.checklist import checklist

    texts, refused = {}, {}
    for jobs in (1, 4):  # one at a time, and more at once than this host has cores
        result = _reduce_in_process(tmp_path, jobs)
        assert result.confirmed is not None and result.confirmed.kept and result.stopped is None
        texts[jobs] = (tmp_path / f"out{jobs}" / "tiny.py").read_text()
        refused[jobs] = (round(result.seconds), result.timeout, result.candidates, result.refusals)
    assert texts[1] == texts[4], (texts, refused)  # refused: why candidates were refused, per jobs
    reduced = texts[1]
    assert result.best is not None
    assert checklist(result.best, {"tiny.py": TIDY}) == [], reduced
    # what the checklist means here, said plainly
    assert "# BUG: a Python number read from a tensor breaks the graph" in reduced
    assert '"""Scales by a learned factor."""' in reduced
    assert "unused_flag" not in reduced and "Scale(8, True)" not in reduced
    assert 'backend="eager"' in reduced and "without inductor" in reduced  # the original named no backend
    assert code_lines(reduced) < code_lines(TIDY)
    shown = run_alone(tmp_path / "out1" / "tiny.py", tmp_path)
    assert shown.returncode == 0 and "Graph break" in shown.stderr and "item()" in shown.stderr, shown.stderr[-2000:]


@pytest.mark.process
def test_a_deadline_past_before_the_tidy_steps_is_said_as_the_time_limit(tmp_path: Path) -> None:
    """Past --max-time the search skips to its last step, tidy steps included: the result then differs from an
    unhurried one, and says why (it said nothing when only tidy steps were left to skip)."""
    from casekit.reduce.run import ReduceRequest, reduce_script
    from casekit.runners.python import PythonRunner
    from casekit.runners.registry import interpreter_target

    script = tmp_path / "small.py"
    script.write_text(
        "import torch\n\n\ndef f(x, unused):\n    n = x.sum().item()\n    return x * n\n\n\n"
        'torch.compile(f, backend="eager")(torch.ones(3), 1)\n'
    )
    request = ReduceRequest(script=script, out=tmp_path / "out", jobs=1, max_seconds=1)
    result = reduce_script(request, PythonRunner(interpreter_target()), lambda message: None)
    assert result.stopped == "time limit"
    assert "item()" in (tmp_path / "out" / "small.py").read_text()  # the last step still wrote what was kept
