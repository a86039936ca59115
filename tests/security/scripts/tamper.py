"""Tries to change what other cases and the probe report; prints one JSON line of outcomes."""

import json
import pathlib
import sys
import time

# Where the probe's state is: a container's batch (/casekit/work: jobs/, out/, runs/, request.json, probe.py),
# else the bwrap session (/casekit: in/probe.py, in/requests/<n>/..., out/<n>/..., runs/<n>/...).
batch = pathlib.Path("/casekit/work")
if batch.is_dir():
    places = {"jobs": batch / "jobs", "out": batch / "out", "env": batch / "out", "request": batch, "next": batch,
              "probe": batch, "runs": batch / "runs"}  # fmt: skip
else:
    session = pathlib.Path("/casekit")
    places = {"jobs": session / "in/requests/1/jobs", "out": session / "out/1", "env": session / "out",
              "request": session / "in/requests/1", "next": session / "in/requests/2", "probe": session / "in",
              "runs": session / "runs/1"}  # fmt: skip
outcomes = {}
# Two workers start their first runs together, in either order: give a victim started beside this run
# the moment to make its run folder, so the attempts below meet it alive.
time.sleep(2)


def attempt(name, path, text="tampered\n"):
    try:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        outcomes[name] = "written"
    except OSError as error:
        outcomes[name] = f"blocked: {type(error).__name__}: {error.strerror}"


attempt("victim_script_copy", places["jobs"] / "victim.pre" / "victim.py", "print('VICTIM TAMPERED')\n")
attempt("victim_result", places["out"] / "victim.pre.result.json", "{not json")
attempt("env_json", places["env"] / "env.json", "{not json")
attempt("request", places["request"] / "request.json", "{}")
attempt("next_request", places["next"] / "request.json", "{}")
attempt("probe", places["probe"] / "probe.py", "raise SystemExit(9)\n")
attempt("runs_folder", places["runs"] / "victim.pre" / "victim.py", "print('VICTIM TAMPERED')\n")
for i, target in enumerate(sys.argv[1:]):  # host paths the test names: the archive, a file in HOME
    attempt(f"host_{i}", target)
print("CASEKIT-TAMPER " + json.dumps(outcomes))
