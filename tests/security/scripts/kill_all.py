"""kill(-1, SIGSTOP) then kill(-1, SIGKILL) (or the signals named in argv): every process this script may
signal. Only its own run must stop."""

import os
import signal
import sys

for signum in [signal.Signals[name] for name in sys.argv[1:]] or [signal.SIGSTOP, signal.SIGKILL]:
    try:
        os.kill(-1, signum)
        print(f"CASEKIT-KILLALL {signum.name} sent")
    except OSError as error:
        print(f"CASEKIT-KILLALL {signum.name} {error.strerror}")
