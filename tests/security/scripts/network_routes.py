"""Tries every route to the host's loopback listener (port in argv[1]); prints one JSON line of outcomes."""

import _socket
import json
import os
import shutil
import socket
import subprocess
import sys

PORT = int(sys.argv[1])
# "loopback-only": the relaxed (network=host) run must never send anything off this machine
LOOPBACK_ONLY = sys.argv[2:] == ["loopback-only"]
TARGET = ("127.0.0.1", PORT)
outcomes = {}


def attempt(name, action):
    try:
        action()
        outcomes[name] = "reached"
    except BaseException as error:  # noqa: BLE001 - every failure is an outcome
        outcomes[name] = f"blocked: {type(error).__name__}: {error}"


def tcp():
    socket.create_connection(TARGET, timeout=3).sendall(b"socket.connect")


def raw_socket():
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    sock.settimeout(3)
    sock.connect(TARGET)
    sock.send(b"_socket")


def restored_connect():
    sock = socket.socket()
    sock.settimeout(3)
    _socket.socket.connect(sock, TARGET)  # the unpatched method of the base class
    sock.sendall(b"restored")


def udp():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.sendto(b"udp sendto", TARGET)


def child_python():
    code = f"import socket; socket.create_connection({TARGET!r}, timeout=3).sendall(b'child python')"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30, capture_output=True)


def child_curl():
    curl = shutil.which("curl")
    if curl is None:
        raise FileNotFoundError("no curl here")
    subprocess.run([curl, "-sS", "-m", "3", f"http://127.0.0.1:{PORT}/curl"], check=True, capture_output=True)


def dns_name():
    socket.getaddrinfo("casekit-sandbox-test.example.com", 80)


def outside_address():
    socket.create_connection(("192.0.2.1", 80), timeout=2)  # TEST-NET-1: never routed


for name, action in [
    ("socket.connect", tcp),
    ("_socket", raw_socket),
    ("restored_connect", restored_connect),
    ("udp_sendto", udp),
    ("child_python", child_python),
    ("child_curl", child_curl),
    ("dns_name", dns_name),
    ("outside_address", outside_address),
]:
    if LOOPBACK_ONLY and name in ("dns_name", "outside_address"):
        continue
    attempt(name, action)
interfaces = sorted(name for _, name in socket.if_nameindex())
print("CASEKIT-NET " + json.dumps({"outcomes": outcomes, "interfaces": interfaces, "pid": os.getpid()}))
