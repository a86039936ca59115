"""One warm probe for many batches: torch imported once, one request per batch (each commit of a
bisection; a replay's batch and then its rollback verification; a reduction's candidates).

`python probe.py --serve STATE_DIR [--first REQUEST]`, in the runner's sandbox (bwrap: the state
folder and the given writable folders bound at their paths), imports torch (making the first
request's eager runs meanwhile, as a batch does), writes STATE_DIR/env.json, answers the first
request, then reads one request path per stdin line and answers each in that request's
out_dir (env.json, <job>.result.json, done.json last). Each run is still a
child forked from the warm interpreter in its own session and killed with its
group afterwards, exactly as in a batch: only the import is shared. The batch
folder layout and reading are the runners' own (`runners.batch`), the process
handling theirs too (`runners.process`): this file only keeps the process
alive between requests. Closing stdin ends the probe; a probe that dies or
overruns is killed with everything it started and restarted on the next
request.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from casekit import settings
from casekit.errors import RunnerError, Stopped
from casekit.runners.batch import lay_out_batch, read_batch, read_env_record
from casekit.runners.interface import PROBE_PATH, ProbeBatchResult, ProbeJob, ProbeScheduling, ProgressFn
from casekit.runners.process import (
    IMPORT_MARGIN_S,
    STOPPING,
    EnvironmentUnusable,
    check_interpreter,
    kill_process_tree,
    overall_timeout,
    raise_if_refused,
    report_finished,
    torch_missing,
)
from casekit.runners.sandbox import Sandbox
from casekit.scrub import temp_prefix

POLL_S = 0.02


class WarmProbe:
    """A probe process that outlives one batch: `run_probe(jobs)` as a runner's, without the import each time."""

    def __init__(
        self,
        python: str,
        env: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
        writable: Sequence[Path] = (),
        scheduling: ProbeScheduling | None = None,
    ) -> None:
        """`sandbox` as the runner's (default: bwrap, no network); `writable`: folders the runs may write
        (e.g. the parent of every commit's worktree), bound when the probe starts; `scheduling`: runs at
        once within one request (default: one at a time)."""
        check_interpreter(python)
        self.python = python
        self.env = env
        self.sandbox = sandbox or Sandbox.from_options()
        self.sandbox.check()
        self.writable = list(writable)
        self.scheduling = scheduling
        self.preload: list[str] = []  # installed modules the probe imports once, before forking runs
        self.state = Path(tempfile.mkdtemp(prefix=temp_prefix("warm")))
        self.stage = self.sandbox.stage_for(self.state)  # the sandbox launcher's, when casekit is root
        self.places = self.sandbox.place([self.state, *self.writable])  # host folder -> where the probe sees it
        self.process: subprocess.Popen[bytes] | None = None
        self.imports = 0  # how many times torch was imported (1 for a whole healthy bisection)
        self.import_s: float | None = None
        self._requests = 0

    def __enter__(self) -> WarmProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _start(self, progress: ProgressFn, first: str | None = None) -> subprocess.Popen[bytes]:
        """Start the probe (`first`: the request it runs once torch is imported, its eager runs made
        during the import) and wait for its import."""
        if self.process is not None and self.process.poll() is None:
            return self.process
        if self.process is not None:
            kill_process_tree(self.process)
        shutil.copy2(PROBE_PATH, self.state / "probe.py")
        (self.state / "env.json").unlink(missing_ok=True)
        log = open(self.state / "probe.log", "ab")
        try:
            process = self.sandbox.popen(
                self.python,
                [f"{self.places[str(self.state)]}/probe.py", "--serve", self.places[str(self.state)]]
                + (["--isolated"] if self.sandbox.isolates else [])
                + (["--first", first] if first else []),
                writable=self.places,
                cwd=self.state,
                chdir=self.places[str(self.state)],
                env=self.env,
                stage=self.stage,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # killable as a group, deaf to our Ctrl-C
            )
        finally:
            log.close()
        self.process, self.imports = process, self.imports + 1
        progress(f"warm probe started in {self.python} (pid {process.pid}); importing torch once …")
        progress(self.sandbox.summary())
        deadline = time.monotonic() + IMPORT_MARGIN_S
        env_path = self.state / "env.json"
        while not env_path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                kill_process_tree(process)
                self.process = None
                raise RunnerError(f"python {self.python}: the warm probe did not start: {self._last_log_line()}")
            time.sleep(POLL_S)
        record = json.loads(env_path.read_text())
        if not record.get("ok"):
            self.close()
            if record.get("refused"):
                raise EnvironmentUnusable(f"python {self.python}: {record.get('error')}")
            raise EnvironmentUnusable(torch_missing(self.python, str(record.get("error"))))
        self.import_s = record.get("import_s")
        progress(f"torch {(record.get('environment') or {}).get('torch')} imported in {self.import_s:.1f} s (once)")
        return process

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        """Run one batch of jobs in the warm interpreter; what came back, as a runner's run_probe returns it."""
        self._requests += 1
        batch_dir = self.state / f"request-{self._requests}"
        root = f"{self.places[str(self.state)]}/{batch_dir.name}"
        try:
            isolation = self.sandbox.run_isolation(self.python)
            request = lay_out_batch(batch_dir, jobs, root, isolation, self.scheduling, moved=self.places)
            extra: dict[str, object] = {"preload": self.preload} if self.preload else {}
            if self.scheduling is not None:  # runs side by side as a batch's are (else one at a time)
                extra["schedule_runs"] = True
            if extra:
                document = json.loads(request.read_text())
                request.write_text(json.dumps({**document, **extra}, indent=1))
            self.sandbox.hand_over(batch_dir)
            for workdir in {Path(w) for w in (getattr(job, "workdir", None) for job in jobs) if w}:
                # made after the probe started (a commit's worktree): the sandbox user's, as the folder it is in
                within = next((Path(w) for w in self.writable if workdir.is_relative_to(w)), None)
                self.sandbox.hand_over(workdir, within)
            if self._running():
                process = self._start(progress)
                assert process.stdin is not None
                try:
                    process.stdin.write(f"{root}/request.json\n".encode())
                    process.stdin.flush()
                except BrokenPipeError:
                    pass  # the probe died: seen below as no done.json
            else:  # the first request starts the probe: its eager runs go ahead while torch imports
                process = self._start(progress, first=f"{root}/request.json")
            limit = overall_timeout(jobs)
            finished = self._wait(process, batch_dir / "out", jobs, limit, progress)
            if not finished:
                progress(f"warm probe stopped after {limit:g} s or died; it restarts on the next request")
                kill_process_tree(process)
                self.process = None
            raise_if_refused(self.python, read_env_record(batch_dir))
            result = read_batch(batch_dir, jobs, self._last_log_line())
            result.import_s = 0.0
            result.environment["sandbox"] = self.sandbox.summary()
            return result
        finally:
            shutil.rmtree(batch_dir, ignore_errors=True)

    def _wait(
        self, process: subprocess.Popen[bytes], out: Path, jobs: list[ProbeJob], limit: float, progress: ProgressFn
    ) -> bool:
        """Until the request's done.json (True), the probe's death or the limit; each finished job is
        reported as a batch reports it, and a stop signal (replay's other targets) ends the wait."""
        deadline = time.monotonic() + limit
        done = out / "done.json"
        reported: set[str] = set()
        try:
            while not done.exists():
                report_finished(out, jobs, reported, progress)
                if process.poll() is not None or time.monotonic() > deadline:
                    return done.exists()
                if STOPPING.is_set():
                    raise Stopped(STOPPING.signum)
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C: nothing of ours keeps running
            kill_process_tree(process)
            self.process = None
            raise
        report_finished(out, jobs, reported, progress)  # the last ones, finished since the last look
        return True

    def _last_log_line(self) -> str:
        try:
            lines = (self.state / "probe.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else "no output"

    def close(self) -> None:
        """End the probe (end of input, then its whole process tree) and remove its folder."""
        process, self.process = self.process, None
        if process is not None:
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            kill_process_tree(process)
        if not settings.keep_batch():
            shutil.rmtree(self.state, ignore_errors=True)
        shutil.rmtree(self.stage, ignore_errors=True)
