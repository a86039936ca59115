"""An HTTP(S) server on 127.0.0.1 for the length of a block: the test indexes and registries serve through it."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def serve(handler: type[http.server.BaseHTTPRequestHandler], tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """Serve `handler` on a free port of 127.0.0.1 in a thread for the block, over TLS with `tls` (key, cert);
    yields 'host:port'."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile=tls[1], keyfile=tls[0])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
