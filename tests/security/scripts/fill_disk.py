"""Writes up to argv[1] MiB into /tmp, its working folder and /dev/shm; says how far each got."""

import json
import os
import sys

limit = int(sys.argv[1])
report = {}
for place in ("/tmp/fill", "fill", "/dev/shm/fill"):
    written = 0
    try:
        with open(place, "wb") as handle:
            while written < limit:
                handle.write(b"x" * (1 << 20))
                handle.flush()
                written += 1
        report[place] = f"{written} MiB"
    except OSError as error:
        report[place] = f"{written} MiB, then {error.strerror}"
    try:
        os.unlink(place)
    except OSError:
        pass
print("CASEKIT-FILL " + json.dumps(report))
