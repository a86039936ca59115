"""A child that stops itself and a parent that waits for it: the run must end at its own timeout."""

import os
import signal

pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
print("CASEKIT-STOPPED waiting", flush=True)
os.waitpid(pid, 0)
