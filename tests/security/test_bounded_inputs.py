"""Unbounded inputs get one clear line, never a traceback, an endless read or all of memory.

The rule (casekit.fsutil, casekit.runners.index_fetch): a regular file, no link unless the user named
it, a size cap, a decompressed-size cap, a nesting cap, an overall deadline, numbers in ASCII digits
and below a bound. Each case beside its control: the same input doing harm with the bound bypassed
(cheaply: under a memory limit, in a thread given up on, on a smaller scale).
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import json
import math
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import casekit.importer as importer
import casekit.runners.torch_source.index as torch_index
from casekit.errors import CasekitError
from casekit.fsutil import UnreadableFile, gunzip_bounded
from casekit.importer import MAX_LOG_BYTES, DraftImportError, import_runs
from casekit.replay.shard import MAX_SHARDS, ShardError, parse_shard, shard_plan
from casekit.replay.shard_env import shard_from_env
from casekit.runners.dynamo import SettingError, parse_dynamo
from casekit.runners.interface import TargetSpec
from casekit.runners.torch_source.index import (
    IndexConfig,
    IndexUnreachable,
    IndexUnreadable,
    list_versions,
    read_listing,
)
from casekit.schedule.plan import choose_shard_count, schedule

from ..conftest import ROOT, run_casekit

TRACE = ROOT / "tests" / "fixtures" / "import" / "torch-2.13.0"
TRACE_NAME = "dedicated_log_torch_trace_rank_0_x.log"
TEN_TO_18 = 10**18


def in_a_thread(call: Callable[[], object]) -> threading.Thread:
    """`call` in a daemon thread, its failure (once unblocked) not reported."""

    def run() -> None:
        with contextlib.suppress(Exception):
            call()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------ shard counts


@pytest.mark.parametrize(
    "attempt",
    [
        lambda: parse_shard(f"1/{TEN_TO_18}"),
        lambda: parse_shard("1/" + "9" * 5000),  # int() of 5,000 digits raises ValueError, not a line
        lambda: shard_plan(["a"], ["t"], TEN_TO_18),
        lambda: shard_from_env({"CASEKIT_SHARD_INDEX": "0", "CASEKIT_SHARD_COUNT": str(TEN_TO_18)}),
        lambda: shard_from_env({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MAX": str(TEN_TO_18)}),
        lambda: schedule(["a"], {}, [TargetSpec(runner="venv", torch="2.13.0")], shards=TEN_TO_18, max_jobs=TEN_TO_18),
    ],
)
def test_a_shard_count_past_the_bound_is_one_line(attempt: Callable[[], object]) -> None:
    with pytest.raises(CasekitError) as raised:
        attempt()
    assert "\n" not in str(raised.value) and (str(MAX_SHARDS) in str(raised.value) or "K/N" in str(raised.value))


def test_the_bound_itself_is_a_plan() -> None:
    assert len(shard_plan(["a"], ["t"], MAX_SHARDS)) == MAX_SHARDS
    assert parse_shard(f"{MAX_SHARDS}/{MAX_SHARDS}") == (MAX_SHARDS, MAX_SHARDS)


CHILD_WITHOUT_THE_BOUND = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import casekit.replay.shard as shard
shard.check_shard_count = lambda n, what: None
try:
    shard.shard_plan(["a"], ["t"], {TEN_TO_18})
except MemoryError:
    print("MemoryError")
"""


@pytest.mark.process
def test_control_without_the_bound_a_plan_of_10_18_shards_eats_all_memory() -> None:
    """Under a 1 GB address-space limit, so the harm is a MemoryError here, not the host's OOM killer."""
    done = subprocess.run([sys.executable, "-c", CHILD_WITHOUT_THE_BOUND], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "MemoryError", done.stderr[-2000:]


def _limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # old code: a MemoryError, not the OOM killer


@pytest.mark.process
def test_replay_with_10_18_shards_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "casekit", "replay", "--archive", str(ROOT / "cases"), "--shard", f"1/{TEN_TO_18}"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limited_memory,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        == f"casekit: error: --shard 1/{TEN_TO_18} gives {TEN_TO_18} shards; casekit cuts at most {MAX_SHARDS}"
    )


@pytest.mark.parametrize("digit", ["²", "٣", "１", "߂", "𝟙"])
def test_only_ascii_digits_name_a_shard(digit: str) -> None:
    for environ in (
        {"CASEKIT_SHARD_INDEX": digit, "CASEKIT_SHARD_COUNT": "4"},
        {"CASEKIT_SHARD_INDEX": "0", "CASEKIT_SHARD_COUNT": digit},
        {"JOB_COMPLETION_INDEX": digit, "CASEKIT_SHARD_COUNT": "4"},
    ):
        with pytest.raises(ShardError, match="is not a whole number"):
            shard_from_env(environ)
    with pytest.raises(ShardError, match="--shard takes K/N"):
        parse_shard(f"1/{digit}")


def test_control_odd_digits_pass_isdigit_and_then_crash_or_mean_something_else() -> None:
    assert "²".isdigit() and "٣".isdigit() and "１".isdigit()
    with pytest.raises(ValueError):
        int("²")
    assert int("٣") == 3 and int("１") == 1 and re.fullmatch(r"\d", "٣")  # read as a shard number before


def test_a_vanishing_shard_length_is_bounded_by_the_cells() -> None:
    assert choose_shard_count(10.0, 2, 10, 256, 5e-324)[0] == 10
    with pytest.raises(OverflowError):  # control: what the count was computed from before
        math.ceil(10.0 / 5e-324)


# ------------------------------------------------------------------ --dynamo values


def test_a_dynamo_value_of_20000_minus_signs_is_one_line() -> None:
    value = "-" * 20_000 + "1"
    with pytest.raises(SettingError) as raised:
        parse_dynamo([f"suppress_errors={value}"])
    assert str(raised.value) == "--dynamo value of 20001 characters: a setting takes at most 200"
    with pytest.raises(MemoryError):  # control: Python's parser, which read the values before
        ast.literal_eval(value)


@pytest.mark.parametrize(
    "text, value",
    [("True", True), ("None", None), ("-3", -3), ("0x10", 16), ("1_000", 1000), ("2.5e-3", 0.0025), ("'x'", "x")],
)
def test_dynamo_values_read_as_before(text: str, value: object) -> None:
    from casekit.runners.dynamo import dynamo_value

    assert dynamo_value(text) == value == ast.literal_eval(text)
    assert dynamo_value("eager_on_recompile") == "eager_on_recompile"


def test_a_dynamo_container_is_refused() -> None:
    with pytest.raises(SettingError, match="give True, False, a number or a name"):
        parse_dynamo(["x=[1, 2]"])


# ------------------------------------------------------------------ casekit import --trace


def trace_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "trace"
    folder.mkdir()
    return folder


def import_error(trace: Path) -> str:
    with pytest.raises(DraftImportError) as raised:
        import_runs(trace, [])
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_a_trace_linked_to_dev_zero_is_refused(tmp_path: Path) -> None:
    folder = trace_folder(tmp_path)
    (folder / TRACE_NAME).symlink_to("/dev/zero")
    assert import_error(folder).endswith("is a symbolic link (casekit reads only regular files)")
    named = tmp_path / "named.log"
    named.symlink_to("/dev/zero")  # the user's own link is followed, to a device it refuses
    assert import_error(named).endswith("is not a regular file (a device or FIFO?)")
    with (folder / TRACE_NAME).open("rb") as endless:  # control: the link reads zeros for ever
        assert endless.read(1 << 20) == bytes(1 << 20) and endless.read(1 << 20) == bytes(1 << 20)


def test_a_trace_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    folder = trace_folder(tmp_path)
    fifo = folder / TRACE_NAME
    os.mkfifo(fifo)
    started = time.monotonic()
    assert import_error(folder).endswith("is not a regular file (a device or FIFO?)")
    assert import_error(fifo).endswith("is not a regular file (a device or FIFO?)")
    assert time.monotonic() - started < 5
    reader = in_a_thread(lambda: fifo.read_bytes())  # control: a plain read waits for a writer for ever
    reader.join(1.0)
    assert reader.is_alive()
    with open(fifo, "wb"):  # the writer it waits for, so the thread ends
        pass
    reader.join(5)


def test_a_trace_past_the_size_cap_is_refused_from_its_size(tmp_path: Path) -> None:
    folder = trace_folder(tmp_path)
    with open(folder / TRACE_NAME, "wb") as sparse:
        sparse.truncate(MAX_LOG_BYTES + 1)  # no disk used: refused before a byte is read
    assert import_error(folder).endswith(f"is over the {MAX_LOG_BYTES} byte limit")


def test_a_gzip_bomb_is_refused_at_the_decompressed_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 1 MB of cap and a 64 MB bomb (the rule is the same at 256 MB and 4 GB, and costs less)."""
    monkeypatch.setattr(importer, "MAX_LOG_BYTES", 1 << 20)
    folder = trace_folder(tmp_path)
    bomb = folder / (TRACE_NAME + ".gz")
    with gzip.open(bomb, "wb", compresslevel=9) as out:
        for _ in range(64):
            out.write(bytes(1 << 20))
    assert bomb.stat().st_size < 1 << 20
    assert import_error(folder).endswith(f"decompresses to more than the {1 << 20} byte limit")
    with gzip.open(bomb, "rb") as control:  # control: the old reader inflated all of it
        assert len(control.read()) == 64 << 20


def test_gunzip_bounded_reads_what_gzip_reads() -> None:
    members = gzip.compress(b"first\n") + gzip.compress(os.urandom(70_000)) + b"\0\0"
    assert gunzip_bounded(members, len(gzip.decompress(members))) == gzip.decompress(members)
    with pytest.raises(UnreadableFile, match="byte limit"):
        gunzip_bounded(members, len(gzip.decompress(members)) - 1)
    with pytest.raises(UnreadableFile, match="truncated"):
        gunzip_bounded(members[:40], 1 << 20)


def test_a_trace_record_nested_100000_deep_is_one_line(tmp_path: Path) -> None:
    folder = trace_folder(tmp_path)
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (folder / TRACE_NAME).write_text(f"V0101 00:00:00.000000 1 torch/_logging/x.py:1] {deep}\n", encoding="utf-8")
    assert import_error(folder).endswith("line 1: a trace record is nested deeper than 32 levels")
    with pytest.raises(RecursionError):  # control: the parser the trace was read with
        json.loads(deep)


FORGED_RECORDS = [
    {"describe_tensor": [1, 2]},
    {"describe_tensor": {"id": [1], "size": {"x": 1}}, "frame_id": [0], "frame_compile_id": {"a": 1}},
    {"describe_source": "text", "frame_id": 0},
    {"artifact": {"name": "torch_version"}, "payload": "[1, 2]"},
    {"compilation_metrics": [1]},
    {"compilation_metrics": {"co_firstlineno": "twelve", "restart_reasons": [""], "python_version": " "}},
    {"compilation_metrics": {"co_firstlineno": [1], "pytorch_version": ["2.13"], "compile_id": {"x": 1}}},
]


def test_forged_trace_records_of_the_wrong_shape_are_no_traceback(tmp_path: Path) -> None:
    folder = trace_folder(tmp_path)
    source = gzip.decompress(next((TRACE / "logging-in-forward" / "trace").glob("*.log.gz")).read_bytes()).decode()
    lines = []
    for record in FORGED_RECORDS:
        payload = record.pop("payload", None)
        lines.append(f"V0101 00:00:00.000000 1 torch/_logging/x.py:1] {json.dumps(record)}")
        if payload:
            lines.append(f"\t{payload}")
    (folder / TRACE_NAME).write_text("\n".join(lines) + "\n" + source, encoding="utf-8")
    assert import_runs(folder, []).drafts  # the real records still import; the forged ones are ignored
    with pytest.raises(AttributeError):  # control: the shape the reader walked them with
        FORGED_RECORDS[0]["describe_tensor"].get("id")  # type: ignore[attr-defined]


@pytest.mark.process
def test_the_import_command_says_one_line_for_a_fifo(tmp_path: Path) -> None:
    folder = trace_folder(tmp_path)
    os.mkfifo(folder / TRACE_NAME)
    done = run_casekit("import", "--trace", str(folder), "--archive", str(tmp_path / "cases"), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"casekit: error: {folder / TRACE_NAME}: is not a regular file (a device or FIFO?)"
    ]


# ------------------------------------------------------------------ package indexes


@contextlib.contextmanager
def dripping_index(head: bytes, drip: bytes = b"<", every_s: float = 0.2) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that sends `head`, then `drip` every `every_s` seconds for ever."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(connection: socket.socket) -> None:
        with connection:
            try:
                connection.recv(65536)
                connection.sendall(head)
                while not stop.wait(every_s):
                    connection.sendall(drip)
            except OSError:
                pass  # the client hung up: what the deadline does

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


BODY_DRIP = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>"
HEADER_DRIP = b"HTTP/1.1 200 OK\r\nX-Slow: "


@pytest.mark.parametrize("head, drip", [(BODY_DRIP, b"<"), (HEADER_DRIP, b"a")], ids=["body", "headers"])
def test_a_dripping_index_is_given_up_at_the_deadline(head: bytes, drip: bytes) -> None:
    with dripping_index(head, drip) as url:
        started = time.monotonic()
        with pytest.raises(IndexUnreachable, match=r"no whole answer within 1 s"):
            read_listing(url, timeout=1.0, deadline=1.0)
        with pytest.raises(IndexUnreadable, match=r"no whole answer within 1 s"):
            list_versions("torch", config=IndexConfig(index_url=url + "/simple/"), timeout=1.0, deadline=1.0)
        assert time.monotonic() - started < 6


def test_control_a_per_read_timeout_never_ends_a_dripping_read() -> None:
    with dripping_index(BODY_DRIP) as url:
        reader = in_a_thread(lambda: urllib.request.urlopen(url + "/torch/", timeout=1.0).read())
        reader.join(3.0)
        assert reader.is_alive()  # a byte every 0.2 s keeps a 1 s timeout from ever firing


def test_an_index_page_past_the_size_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_index, "MAX_PAGE_BYTES", 1000)
    page = b"<a href='torch-2.13.0.tar.gz'>x</a>" * 100
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(page)
    with dripping_index(head + page, every_s=60) as url:
        with pytest.raises(IndexUnreadable, match="larger than 1000 bytes"):
            list_versions("torch", config=IndexConfig(index_url=url + "/simple/"), deadline=10)


def test_a_pep691_page_nested_deep_is_one_line() -> None:
    body = b'{"files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.pypi.simple.v1+json\r\nContent-Length: %d\r\n\r\n" % len(
        body
    )
    with dripping_index(head + body, every_s=60) as url:
        with pytest.raises(IndexUnreadable, match="nested deeper than 16 levels"):
            list_versions("torch", config=IndexConfig(index_url=url + "/simple/"), deadline=10)


def test_a_fifo_named_as_an_index_or_a_pip_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "simple" / "torch").mkdir(parents=True)
    fifo = tmp_path / "simple" / "torch" / "index.html"
    os.mkfifo(fifo)
    with pytest.raises(IndexUnreadable, match="is not a regular file"):
        list_versions("torch", config=IndexConfig(index_url=(tmp_path / "simple").as_uri()), deadline=5)
    config = torch_index.read_config({"PIP_CONFIG_FILE": str(fifo), "UV_NO_CONFIG": "1", "HOME": str(tmp_path)})
    assert str(fifo) not in config.sources  # skipped at once, as pip skips what it cannot read
