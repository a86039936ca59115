"""Leaves files where a later run would find them (/tmp, HOME's cache, /dev/shm), or reports what an earlier run left."""

import json
import os
import sys

places = ["/tmp/casekit-planted", os.path.expanduser("~/.cache/casekit-planted"), "/dev/shm/casekit-planted"]
if sys.argv[1] == "plant":
    for place in places:
        os.makedirs(os.path.dirname(place), exist_ok=True)
        with open(place, "w") as handle:
            handle.write("planted by an earlier case\n")
print("CASEKIT-PLANT " + json.dumps({place: os.path.exists(place) for place in places}))
