"""Kills the probe (its parent) with SIGKILL: this case fails, the next cases must still run."""

import os
import signal

os.kill(os.getppid(), signal.SIGKILL)
