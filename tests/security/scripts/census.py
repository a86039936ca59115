"""Counts the processes (in this sandbox's /proc) whose command line holds argv[1]."""

import os
import sys

mark = sys.argv[1].encode()
left = []
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if mark in handle.read():
                    left.append(int(entry))
        except OSError:
            pass
print(f"CASEKIT-CENSUS {len(left)}")
