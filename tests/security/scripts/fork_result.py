"""A child forked by the script leaves with os._exit(0); then the script is killed. The run must say killed,
not the child's "ok" (a child's exit is not the script's)."""

import os
import signal

child = os.fork()
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
os.kill(os.getpid(), signal.SIGKILL)
