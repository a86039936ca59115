"""The sandboxed session of the python and venv runners: one warm probe (one torch import) serving a caller's
batches one request at a time, and every way casekit runs a script on this host goes through one.

The probe (`python probe.py --serve OUT [--isolated] [--first REQUEST]`, in the runner's sandbox) imports
torch, writes OUT/env.json, answers the first request, then reads one request path per stdin line. Each
run is still a child forked from the warm interpreter in its own namespaces and killed with everything it
started; only the import is shared. What the session keeps on the host:

    ROOT/            mkdtemp: casekit's own, 0700; no other process of the sandbox uid can enter it
      in/            casekit's, read-only inside (/casekit/in): probe.py and requests/<n>/ (jobs, request.json),
                     each request made fresh (FreshTree: never over something there, never through a link)
      out/           the probe's (given to the sandbox uid by fchown when it is made): env.json, then
                     <n>/ per request (env.json, <job>.result.json, done.json last), read back without
                     following a link, bounded, schema-checked
    /casekit/runs    inside only: a size-bounded tmpfs where each run gets a fresh copy of its job folder

A run sees neither requests/ nor out/ (the probe hides them in each run's view), nor anything a run
before it left. Nothing is written, read or chowned by casekit in a folder a run could write. The probe's
output goes through a pipe, its last lines kept in memory (bounded). A probe that dies mid-request is
restarted for the scripts after the one it died in; one that overruns is killed and restarted on the next
request.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from casekit import settings
from casekit.errors import RunnerError, Stopped
from casekit.fsutil import FreshTree, SafeFolder, UnreadableFile
from casekit.runners.batch import (
    MAX_ENV_BYTES,
    NOT_REACHED,
    RequestPlaces,
    ResultUnreadable,
    copy_probe,
    lay_out_request,
    read_batch,
    read_env_record,
    read_json_file,
    results_folder,
)
from casekit.runners.interface import (
    ProbeBatchResult,
    ProbeJob,
    ProbeScheduling,
    ProbeSession,
    ProgressFn,
    ScriptEntry,
)
from casekit.runners.process import (
    IMPORT_MARGIN_S,
    STOPPING,
    EnvironmentUnusable,
    check_interpreter,
    kill_process_tree,
    overall_timeout,
    raise_if_refused,
    report_finished,
    sweep_stale_batches,
    torch_missing,
)
from casekit.runners.sandbox import Bind, Sandbox
from casekit.scrub import temp_prefix

POLL_S = 0.02
SESSION_PREFIX = temp_prefix("session")
INSIDE = "/casekit"  # where the sandbox shows the session: in/ read-only, out/ the probe's, runs/ a tmpfs
LOG_LINES = 200  # the probe's last lines kept (its output is never parsed: only shown when it fails)
LOG_LINE_CHARS = 2000


class ProbeLog:
    """The probe's stdout and stderr, read from a pipe by a thread: the last LOG_LINES lines, each cut to
    LOG_LINE_CHARS, in memory. No file a run could swap for a link, a FIFO or /dev/zero."""

    def __init__(self, pipe: Any) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self._partial = b""
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        try:
            while chunk := pipe.read1(1 << 16) if hasattr(pipe, "read1") else pipe.read(1 << 16):
                *complete, self._partial = (self._partial + chunk).split(b"\n")
                self._partial = self._partial[-LOG_LINE_CHARS:]
                for line in complete:
                    self.lines.append(line[:LOG_LINE_CHARS].decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass
        finally:
            if self._partial:
                self.lines.append(self._partial.decode("utf-8", "replace"))
            pipe.close()

    def finish(self, timeout: float = 2.0) -> None:
        """Wait (briefly) for the last output of a process that ended."""
        self._thread.join(timeout)

    def last_line(self) -> str:
        for line in reversed(self.lines):
            if line.strip():
                return line.strip()
        return "no output"

    def text(self) -> str:
        return "\n".join(self.lines)


class WarmSession(ProbeSession):
    """A probe process that outlives one batch, in the runner's sandbox; see the module's docstring."""

    warm = True
    supports_turns = True  # a job's FIFOs are made in its request folder, which the probe sees and no run does;
    # jobs in turns run at once

    def __init__(
        self,
        python: str,
        entry: ScriptEntry | None,
        sandbox: Sandbox,
        env: Mapping[str, str] | None = None,
        scheduling: ProbeScheduling | None = None,
    ) -> None:
        """`entry`: which way of running scripts this session serves (None: one batch of a runner's own);
        `env`: variables the probe gets beside the sandbox's allow-list; `scheduling`: runs at once within a
        request (None: one at a time)."""
        super().__init__(entry)
        check_interpreter(python)
        sandbox.check(python)
        self.python = python
        self.env = env
        self.sandbox = sandbox
        self.scheduling = scheduling
        self.process: subprocess.Popen[bytes] | None = None
        self.log: ProbeLog | None = None
        self._requests = 0
        self._import_paid = False  # the next request's result carries the import time
        self._said: ProgressFn = lambda message: None  # the last caller's progress (for what close() says)
        sweep_stale_batches()  # what a killed casekit left (its folders are named with its pid)
        self.root = Path(tempfile.mkdtemp(prefix=f"{SESSION_PREFIX}{os.getpid()}-"))  # the pid: swept if we die
        try:
            self._lay_out_session()
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.stage = sandbox.make_stage()

    def _lay_out_session(self) -> None:
        with FreshTree(self.root / "in") as inputs:
            copy_probe(inputs)
            inputs.folder("requests")
        os.mkdir(self.root / "out", 0o700)
        fd = os.open(self.root / "out", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            uid, gid = self.sandbox.user
            if (uid, gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, uid, gid)  # the folder just made, by its fd: the probe writes its results there
        finally:
            os.close(fd)
        if not self.sandbox.isolates:  # no tmpfs without a sandbox: the runs' folders are the session's
            os.mkdir(self.root / "runs", 0o700)
        isolates = self.sandbox.isolates
        self.inside = {
            "in": f"{INSIDE}/in" if isolates else str(self.root / "in"),
            "out": f"{INSIDE}/out" if isolates else str(self.root / "out"),
            "runs": f"{INSIDE}/runs" if isolates else str(self.root / "runs"),
        }

    # ------------------------------------------------------------------ the probe process

    def _running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _start(self, progress: ProgressFn, first: str, limit: float) -> bool:
        """Start the probe (`first`: the request it runs once torch is imported, its eager runs made
        during the import) and wait for its import; False when the request's `limit` ran out meanwhile."""
        if self.process is not None:
            kill_process_tree(self.process)
        self._forget_import_record()
        inside = self.inside
        args = [f"{inside['in']}/probe.py", "--serve", inside["out"]]
        args += ["--isolated"] if self.sandbox.isolates else []
        args += ["--first", first] if first else []
        process = self.sandbox.popen(
            self.python,
            args,
            binds=[Bind(str(self.root / "in"), inside["in"]), Bind(str(self.root / "out"), inside["out"], True)],
            scratch=[inside["runs"]] if self.sandbox.isolates else [],
            cwd=self.root / "in",
            chdir=inside["in"],
            env=self.env,
            stage=self.stage,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # killable as a group, deaf to our Ctrl-C
        )
        self.process, self.log = process, ProbeLog(process.stdout)
        self.imports += 1
        # a session of an entry serves its every batch; a runner's own batch (no entry) is one
        kind = f"warm probe started for {self.entry.value}" if self.entry is not None else "probe started"
        progress(f"{kind} in {self.python} (pid {process.pid}): importing torch, warming Dynamo up …")
        progress(self.sandbox.summary())
        for refused in self.sandbox.refused_folders(self.python):
            progress(f"sandbox: not shown: {refused}")
        started = time.monotonic()
        record = None
        while record is None:
            record = self._import_record()
            if record is None and time.monotonic() > started + limit:
                self._kill()
                return False
            if record is None and (process.poll() is not None or time.monotonic() > started + IMPORT_MARGIN_S):
                self._kill()
                raise RunnerError(f"python {self.python}: the probe did not start: {self._last_log_line()}")
            if STOPPING.is_set():
                self._kill()
                raise Stopped(STOPPING.signum)
            if record is None:
                time.sleep(POLL_S)
        if not record.get("ok"):
            self.close()
            if record.get("refused"):
                raise EnvironmentUnusable(f"python {self.python}: {record.get('error')}")
            raise EnvironmentUnusable(torch_missing(self.python, str(record.get("error"))))
        seconds = record.get("import_s")
        self.import_s = float(seconds) if isinstance(seconds, (int, float)) else None
        self._import_paid = True
        took = f" in {self.import_s:.1f} s" if self.import_s is not None else ""
        progress(f"torch {(record.get('environment') or {}).get('torch')} imported{took} (once)")
        return True

    def _import_record(self) -> dict[str, Any] | None:
        """out/env.json, once the probe wrote it (read as every result is)."""
        with results_folder(self.root, "out") as out:
            return read_env_record(out)

    def _forget_import_record(self) -> None:
        # a restarted probe writes its own: an old one must not pass for it (removed by name, no link followed)
        try:
            with SafeFolder.open(self.root, "out") as out:
                os.unlink("env.json", dir_fd=out.fd)
        except (FileNotFoundError, UnreadableFile):
            pass

    def _kill(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            kill_process_tree(process)
        if self.log is not None:
            self.log.finish()

    def _last_log_line(self) -> str:
        return self.log.last_line() if self.log is not None else "no output"

    def start(self, progress: ProgressFn) -> None:
        """The probe, started in this thread if it is not running: bwrap's --die-with-parent is the parent
        *thread*'s death (PR_SET_PDEATHSIG), so a probe a short-lived thread started would die with it."""
        if not self._running():
            self._start(progress, "", IMPORT_MARGIN_S)

    # ------------------------------------------------------------------ requests

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """Run one batch of jobs in the warm interpreter; what came back, as a runner's run_probe returns it.
        A probe that dies in a script is restarted for the scripts after it, as a batch's is; one that dies
        with several scripts running side by side first runs them again one at a time, so that the script
        blamed is the one it died in."""
        self._said = progress
        remaining = list(jobs)
        merged: ProbeBatchResult | None = None
        deadline = time.monotonic() + overall_timeout(jobs)
        scheduling = self.scheduling
        in_turns = any(job.turns is not None for job in jobs)
        if in_turns:  # their turns keep them apart, not the probe: one at a time, the first would wait forever
            scheduling = ProbeScheduling(parallel_runs=len(jobs))
        while remaining:
            left = max(1.0, deadline - time.monotonic())
            result, died, timed_out = self._request(remaining, progress, left, scheduling)
            if merged is None:
                merged = result
            else:
                merged.results.update(result.results)
                merged.failed.update(result.failed)
                for job_id in result.results:  # a script run again, which came back this time
                    merged.failed.pop(job_id, None)
            if timed_out:
                limit = overall_timeout(jobs)
                for job_id in result.failed:
                    merged.failed[job_id] = f"the probe was stopped after its overall limit of {limit:g} s"
                break
            # the scripts the probe ended before: no result, no record of a lost worker, nothing tampered with
            unfinished = [job for job in remaining if result.failed.get(job.id, "").startswith(NOT_REACHED)]
            if not died or not unfinished or in_turns:
                break  # nothing died mid-script (a restart would not help), or runs whose turns were this request's
            if scheduling is not None and scheduling.parallel_runs != 1 and len(unfinished) > 1:
                # several scripts may have been running when it died, and which one it died in is not known:
                # they run again one at a time, where the first without a result is the one it died in
                scheduling, remaining = replace(scheduling, parallel_runs=1), unfinished
                progress(
                    f"the probe died ({died}) with {len(unfinished)} scripts unfinished; running them again one "
                    "at a time in a new probe, to tell which one it died in"
                )
                continue
            died_in = unfinished[0]
            merged.failed[died_in.id] = (
                f"the probe died while running this script ({died}); the scripts after it ran in a new probe"
            )
            remaining = unfinished[1:]
            if remaining:
                progress(f"the probe died in {died_in.id}; restarting it for the {len(remaining)} script(s) after it")
        assert merged is not None
        merged.environment["sandbox"] = self.sandbox.summary()
        return merged

    def _request(
        self, jobs: list[ProbeJob], progress: ProgressFn, limit: float, scheduling: ProbeScheduling | None
    ) -> tuple[ProbeBatchResult, str, bool]:
        """One request to the probe: (what came back, how the probe died or "", whether it overran);
        `scheduling`: how its runs share the cores (the session's, or one at a time after a death)."""
        self._requests += 1
        number = str(self._requests)
        places = RequestPlaces(
            folder=f"{self.inside['in']}/requests/{number}",
            out_dir=f"{self.inside['out']}/{number}",
            runs_dir=f"{self.inside['runs']}/{number}",
            batch_root=self.inside["in"],  # read-only already; what the runs must not see is hidden below
            hidden=(f"{self.inside['in']}/requests", self.inside["out"]),
            private=(self.inside["runs"],) if self.sandbox.isolates else (),
        )
        folder = self.root / "in" / "requests" / number
        extra: dict[str, object] = {"preload": self.preload} if self.preload else {}
        if scheduling is not None:  # runs side by side as a batch's are (else one at a time)
            extra["schedule_runs"] = True
        try:
            with FreshTree(folder) as tree:
                lay_out_request(tree, jobs, places, self.sandbox.run_isolation(self.python), scheduling, extra)
            request = f"{places.folder}/request.json"
            begun = time.monotonic()
            if self._running():
                assert self.process is not None and self.process.stdin is not None
                try:
                    self.process.stdin.write(f"{request}\n".encode())
                    self.process.stdin.flush()
                except BrokenPipeError:
                    pass  # the probe died: seen below as no done.json
            elif not self._start(progress, request, limit):  # its eager runs go ahead while torch imports
                progress(f"probe exceeded its overall limit of {limit:g} s; stopping it")
                with results_folder(self.root, "out", number) as out:
                    return read_batch(out, jobs, self._last_log_line()), "", True
            process = self.process
            assert process is not None
            finished = self._wait(process, number, jobs, limit - (time.monotonic() - begun), progress)
            died = ""
            if not finished:
                code = process.poll()
                died = _exit_description(code) if code is not None else ""
                if code is None:
                    progress(f"probe exceeded its overall limit of {limit:g} s; stopping it")
                self._kill()
            with results_folder(self.root, "out", number) as out:
                raise_if_refused(self.python, read_env_record(out))
                result = read_batch(out, jobs, self.log.text() if self.log else "")
            result.import_s = self.import_s if self._import_paid else 0.0
            self._import_paid = False
            return result, died, not finished and not died
        finally:
            if not settings.keep_batch():
                shutil.rmtree(folder, ignore_errors=True)
                _remove_results(self.root, number)

    def _wait(self, process: subprocess.Popen[bytes], number: str, jobs: list[ProbeJob], limit: float,
              progress: ProgressFn) -> bool:  # fmt: skip
        """Until the request's done.json (True), the probe's death or the limit; each finished job is
        reported as a batch reports it, and a stop signal (replay's other targets) ends the wait."""
        deadline = time.monotonic() + limit
        reported: set[str] = set()
        try:
            while True:
                with results_folder(self.root, "out", number) as out:
                    if out is not None:
                        report_finished(out, jobs, reported, progress)
                        if _done(out):
                            return True
                if process.poll() is not None or time.monotonic() > deadline:
                    with results_folder(self.root, "out", number) as out:
                        return out is not None and _done(out)
                if STOPPING.is_set():
                    raise Stopped(STOPPING.signum)
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C: nothing of ours keeps running
            self._kill()
            raise

    def close(self) -> None:
        """End the probe (end of input, then its whole process tree) and remove the session's folders."""
        process, self.process = self.process, None
        if process is not None:
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
            try:  # a stop signal does not wait for a probe to end by itself
                process.wait(timeout=0 if STOPPING.is_set() else 5)
            except subprocess.TimeoutExpired:
                pass
            kill_process_tree(process)
        if self.log is not None:
            self.log.finish()
        if settings.keep_batch():
            self._said(f"session kept at {self.root} ({settings.KEEP_BATCH_ENV}=1)")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None


def _done(out: SafeFolder) -> bool:
    """The request's done.json is there and is the probe's (a regular file that reads as JSON)."""
    if not out.has("done.json"):
        return False
    try:
        read_json_file(out, "done.json", MAX_ENV_BYTES)
    except (FileNotFoundError, ResultUnreadable):
        return False
    return True


def _remove_results(root: Path, number: str) -> None:
    """out/<n>/ once read: removed from a folder opened without following a link (shutil.rmtree removes
    what is below by fd, and never follows a link either)."""
    try:
        with SafeFolder.open(root, "out") as out:
            shutil.rmtree(number, dir_fd=out.fd)
    except (OSError, UnreadableFile):
        pass


def _exit_description(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
