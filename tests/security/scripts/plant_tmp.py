"""Leaves files where a later run would find them (/tmp, HOME's cache, /dev/shm, a sticky folder of its own in
/tmp holding a file closed to all), or reports what an earlier run left."""

import json
import os
import sys

places = ["/tmp/casekit-planted", os.path.expanduser("~/.cache/casekit-planted"), "/dev/shm/casekit-planted"]
sticky = "/tmp/casekit-sticky/planted"  # only its owner, or CAP_FOWNER, may remove what is in a sticky folder
if sys.argv[1] == "plant":
    for place in places:
        os.makedirs(os.path.dirname(place), exist_ok=True)
        with open(place, "w") as handle:
            handle.write("planted by an earlier case\n")
    os.mkdir(os.path.dirname(sticky))
    os.chmod(os.path.dirname(sticky), 0o1777)
    with open(sticky, "w") as handle:
        handle.write("planted by an earlier case\n")
    os.chmod(sticky, 0)
print("CASEKIT-PLANT " + json.dumps({place: os.path.exists(place) for place in [*places, sticky]}))
