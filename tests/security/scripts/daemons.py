"""Leaves a double-fork daemon and a start_new_session child behind.

They carry a marker the test finds in the host's /proc: argv[1] in their command lines (and
CASEKIT_TEST_TOKEN in their environment where the runner passes it). argv[2] == "hang": then hang.
"""

import os
import subprocess
import sys
import time

MARK = sys.argv[1] if len(sys.argv) > 1 else "casekit-daemon"
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)", MARK]

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, SLEEP)
    os._exit(0)
subprocess.Popen(SLEEP, start_new_session=True)
time.sleep(0.5)
print("daemons started")
if len(sys.argv) > 2 and sys.argv[2] == "hang":
    time.sleep(600)
