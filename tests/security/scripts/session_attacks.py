"""Attacks, from inside a run, everything a sandboxed run could reach; prints one JSON line of what held.

The test fills in the two host paths below (they lie where no sandbox shows them) and BREAKS. The
script plants links to them in every folder it can write outside its own (a state folder casekit
might write, read or chown through), tries to forge results, to mount a tmpfs of its own, to read
the sandbox's command line, and leaves a mark wherever it can. Whenever an attack wins (an earlier
run's mark is seen, a folder outside its own is writable, the mount works), the compiled function
below breaks its graph: the host sees a win in the observation too, whatever path the run took.
"""

import ctypes
import json
import os
import sys

import torch

CANARY_DIR = "__CANARY_DIR__"  # a host folder: nothing may land in it, its owner and mode must not change
CANARY_FILE = "__CANARY_FILE__"  # a host file: its bytes, owner and mode must not change
BREAKS = False  # True: the script also has a graph break of its own (Tensor.item), for a reducer to keep
MARK = ".casekit-attack-mark"
# names casekit's sessions and batches have used for their state: links to the canaries under each
NAMES = ["probe.log", "env.json", "done.json", "request.json", "probe.py", "out", "runs", "jobs", "requests", "in"]
NAMES += [str(n) for n in range(1, 8)] + [f"request-{n}" for n in range(1, 8)] + ["commit.result.json"]
report = {"escaped": [], "planted": 0, "forged": [], "seen_mark": [], "mount": "", "proc1": "", "cwd_fs": ""}


# A perf run's compile cache is its job's own, kept for its next runs on purpose (a warm compile reads it)
PERF_CACHE = os.path.dirname(os.environ["TORCHINDUCTOR_CACHE_DIR"]) if "TORCHINDUCTOR_CACHE_DIR" in os.environ else None


def mine(folder):
    """The run's own places: its folder (the working directory), /tmp, /dev/shm and HOME (under /tmp), and a
    perf run's compile cache."""
    real = os.path.realpath(folder)
    for own in (os.getcwd(), "/tmp", "/dev/shm", os.environ.get("HOME") or "/tmp", PERF_CACHE or os.getcwd()):
        own = os.path.realpath(own)
        if real == own or real.startswith(own.rstrip("/") + "/"):
            return True
    return False


def folders():
    found = {"/", "/tmp", "/dev/shm", os.environ.get("HOME") or "/tmp", *([PERF_CACHE] if PERF_CACHE else [])}
    for start in (os.getcwd(), os.path.dirname(os.path.abspath(__file__))):
        while True:
            found.add(start)
            if start == "/":
                break
            start = os.path.dirname(start)
    count = 0
    for root in ("/casekit",):
        for folder, dirs, _files in os.walk(root):
            found.add(folder)
            count += 1
            if count > 3000 or folder.count("/") > 8:
                dirs[:] = []
    return sorted(found)


def writable(folder):
    probe = os.path.join(folder, f".casekit-attack-{os.getpid()}")
    try:
        with open(probe, "w") as handle:
            handle.write("x")
        os.unlink(probe)
        return True
    except OSError:
        return False


for folder in folders():
    if os.path.lexists(os.path.join(folder, MARK)) and not (PERF_CACHE and folder.startswith(PERF_CACHE)):
        report["seen_mark"].append(folder)  # (its own job's earlier runs may leave one in the perf cache)
    if not writable(folder):
        continue
    if not mine(folder):
        report["escaped"].append(folder)
    for name in NAMES:
        for suffix, target in (("", CANARY_DIR), (".file", CANARY_FILE)):
            try:
                os.symlink(target, os.path.join(folder, name + suffix))
                report["planted"] += 1
            except OSError:
                pass
    for name in os.listdir(folder) if not mine(folder) else []:
        if name.endswith(".result.json"):
            try:
                with open(os.path.join(folder, name), "w") as handle:
                    handle.write('{"forged": true}')
                report["forged"].append(os.path.join(folder, name))
            except OSError:
                pass
    try:
        with open(os.path.join(folder, MARK), "w") as handle:
            handle.write("a run was here\n")
    except OSError:
        pass

libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x00020000) == 0:  # a user and mount namespace of its own
    os.makedirs("/tmp/casekit-attack-big", exist_ok=True)
    code = libc.mount(b"tmpfs", b"/tmp/casekit-attack-big", b"tmpfs", 0, b"size=100g")
    report["mount"] = "reached" if code == 0 else "blocked: mount: " + os.strerror(ctypes.get_errno())
else:
    report["mount"] = "blocked: unshare: " + os.strerror(ctypes.get_errno())
try:
    with open("/proc/1/cmdline", "rb") as handle:
        report["proc1"] = handle.read(4000).replace(b"\0", b" ").decode("utf-8", "replace")
except OSError as error:
    report["proc1"] = "unreadable: " + error.strerror
with open("/proc/self/mountinfo") as handle:  # the file system the run's folder is on: a tmpfs, not a disk
    points = [(line.split(" - ")[0].split()[4], line.split(" - ")[1].split()[0]) for line in handle]
here = os.path.realpath(os.getcwd())
under = [(point, kind) for point, kind in points if here == point or here.startswith(point.rstrip("/") + "/")]
report["cwd_fs"] = max(under, key=lambda pair: len(pair[0]))[1] if under else "?"
won = bool(report["seen_mark"] or report["escaped"] or report["forged"] or report["mount"] == "reached")
report["won"] = won
print("CASEKIT-ATTACK " + json.dumps(report))
sys.stdout.flush()


def step(x):
    y = x.sin()
    if BREAKS:
        y = y * x.sum().item()  # the script's own graph break (Tensor.item)
    if won:
        print("an attack won")  # a graph break the host sees
    return y + 1


torch.compile(step, backend="eager")(torch.ones(3))
