"""Forks up to argv[1] sleeping children; says how many it made before a fork failed."""

import json
import os
import sys
import time

made, failure = 0, None
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError as error:
        failure = error.strerror
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    made += 1
print("CASEKIT-FORKS " + json.dumps({"made": made, "failure": failure}))
