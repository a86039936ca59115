"""kill(-1, SIGSTOP) then kill(-1, SIGKILL): every process this script may signal. Only its own run must stop."""

import os
import signal

for signum in (signal.SIGSTOP, signal.SIGKILL):
    try:
        os.kill(-1, signum)
        print(f"CASEKIT-KILLALL {signum.name} sent")
    except OSError as error:
        print(f"CASEKIT-KILLALL {signum.name} {error.strerror}")
