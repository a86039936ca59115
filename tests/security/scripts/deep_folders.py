"""Leaves folders nested argv[1] deep in its working folder and in /tmp (a recursive remover runs out of stack)."""

import os
import sys

depth = int(sys.argv[1])
for place in (".", "/tmp"):
    fd = os.open(place, os.O_RDONLY)
    name = "casekit-deep"
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd, name = inner, "d"
    os.close(fd)
print(f"CASEKIT-DEEP {depth}")
