"""Leaves a double-fork daemon and a start_new_session child behind (they carry CASEKIT_TEST_TOKEN)."""

import os
import subprocess
import sys
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
time.sleep(0.5)
print("daemons started")
if len(sys.argv) > 1 and sys.argv[1] == "hang":
    time.sleep(600)
