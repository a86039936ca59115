"""Says it is intact; with argv[1], after that many seconds (to be running while an attack runs beside it)."""

import sys
import time

if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))
print("VICTIM INTACT")
