"""Tries to change what other cases and the probe report; prints one JSON line of outcomes."""

import json
import pathlib
import sys
import time

here = pathlib.Path(__file__).resolve()
batch = here.parents[2]  # <batch>/runs/<job>/tamper.py
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


attempt("victim_script_copy", batch / "jobs" / "victim.pre" / "victim.py", "print('VICTIM TAMPERED')\n")
attempt("victim_result", batch / "out" / "victim.pre.result.json", "{not json")
attempt("env_json", batch / "out" / "env.json", "{not json")
attempt("request", batch / "request.json", "{}")
attempt("probe", batch / "probe.py", "raise SystemExit(9)\n")
attempt("runs_folder", batch / "runs" / "victim.pre" / "victim.py", "print('VICTIM TAMPERED')\n")
for i, target in enumerate(sys.argv[1:]):  # host paths the test names: the archive, a file in HOME
    attempt(f"host_{i}", target)
print("CASEKIT-TAMPER " + json.dumps(outcomes))
