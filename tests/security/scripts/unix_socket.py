"""Connects to a unix socket the test names (the shape of /var/run/docker.sock) and asks it something."""

import json
import socket
import sys

path = sys.argv[1]
try:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(path)
    client.sendall(b"GET /version HTTP/1.0\r\n\r\n")
    outcome = "reached: " + client.recv(200).decode(errors="replace")
except OSError as error:
    outcome = f"blocked: {type(error).__name__}: {error.strerror}"
print("CASEKIT-UNIX " + json.dumps({"outcome": outcome}))
