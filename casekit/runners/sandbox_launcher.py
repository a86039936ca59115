"""Start bubblewrap as an unprivileged user when casekit runs as root.

casekit runs this file as `python -I -S sandbox_launcher.py SPEC` (SPEC is JSON)
only when it is root: root's scripts must not run as root, and bwrap started by
an unprivileged uid cannot open what that uid may not traverse (an interpreter
under /root, casekit's own bwrap under /root/.pyenv/...). So this launcher, still
root, makes a mount namespace of its own, mounts a small tmpfs on SPEC's `stage`
folder and binds each folder the sandbox must show there (`binds`: [name,
source] pairs), makes the stage read-only, drops to SPEC's uid and gid with no
supplementary groups, checks that root cannot be regained, and execs `argv`
(bwrap, which reads its sources from the stage). The private mount namespace
ends with the sandbox; nothing is mounted on the host.

Standard library only, no casekit imports: it runs before anything else of
casekit's is needed, from casekit's own interpreter in isolated mode.
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
STAGE_OPTIONS = "mode=0755,size=1m"


def fail(message):
    sys.stderr.write(f"casekit sandbox launcher: {message}\n")
    os._exit(126)


def _mount(libc, source, target, fstype, flags, data=None):
    def encode(text):
        return None if text is None else text.encode()

    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        fail(f"mount {target}: {os.strerror(error)}")


def stage_binds(libc, stage, binds):
    """Bind each source under the stage (private to this process's mount namespace), then make it read-only."""
    if libc.unshare(CLONE_NEWNS) != 0:
        fail(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    _mount(libc, "tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, STAGE_OPTIONS)
    for name, source in binds:
        target = os.path.join(stage, name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if os.path.isdir(source):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        _mount(libc, source, target, None, MS_BIND | MS_REC)
    _mount(libc, None, stage, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, STAGE_OPTIONS)


def drop_to(uid, gid):
    """setgroups([]), setgid, setuid; refuse to go on if root could be regained. A no-op for the caller's own ids."""
    if (os.geteuid(), os.getegid()) == (uid, gid) and uid != 0:
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        fail("the unprivileged identity did not take")
    try:
        os.setuid(0)
    except PermissionError:
        return
    fail("root could be regained after dropping privileges")


def main(argv):
    if len(argv) != 2:
        fail("usage: sandbox_launcher.py SPEC_JSON")
    spec = json.loads(argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    if spec.get("binds"):
        stage_binds(libc, spec["stage"], spec["binds"])
    drop_to(int(spec["uid"]), int(spec["gid"]))
    for name, value in (spec.get("limits") or {}).items():  # after the drop: RLIMIT_NPROC binds for a non-root uid
        resource.setrlimit(getattr(resource, "RLIMIT_" + name), (int(value), int(value)))
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # cleared by the uid change: set again
    if os.getppid() != int(spec["parent"]):  # casekit died before the line above: do not start orphaned
        os._exit(125)
    command = spec["argv"]
    try:
        os.execv(command[0], command)
    except OSError as error:
        fail(f"cannot run {command[0]}: {error.strerror}")


if __name__ == "__main__":
    main(sys.argv)
