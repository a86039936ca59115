"""One HTTP(S) read of a package index, bounded as a whole: an overall deadline and a size cap.

urllib's `timeout` is per socket operation, so an index that sends one byte every few seconds
(headers or body) keeps a read alive for ever. Here a timer shuts the connection down when the
deadline passes, whatever the read is waiting for: the status line, a header, the body, or a
redirect's next connection. The body is read up to a size cap. `file:` URLs are read as files
(regular files only, bounded), so a FIFO or `/dev/zero` named as an index cannot hang it either.

casekit's one index reader, `casekit.runners.torch_source.index`, reads every page through it.
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casekit.fsutil import UnreadableFile, read_regular_bytes


class DeadlinePassed(TimeoutError):
    """The whole read took longer than its deadline (an OSError: callers treat it as no answer)."""


class AnswerTooLarge(OSError):
    """The index's answer is larger than the cap on it."""


@dataclass(frozen=True)
class Answer:
    """What an index answered: the status, the content type and charset, and the body (up to the cap)."""

    status: int
    content_type: str
    charset: str | None
    body: bytes


class _Deadline:
    """The connections of one read; `expire` shuts them all down (a blocked recv then returns)."""

    def __init__(self) -> None:
        self.expired = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    def watch(self, sock: socket.socket) -> socket.socket:
        # A duplicate of the descriptor: TLS wrapping detaches the original object, not the connection.
        with self._lock:
            self._sockets.append(sock.dup())
            expired = self.expired.is_set()
        if expired:
            self.expire()
        return sock

    def expire(self) -> None:
        with self._lock:
            self.expired.set()
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its reader

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()


class _Watched:
    """A connection whose every TCP socket joins the read's deadline as soon as it is connected."""

    _create_connection: Any

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        create = self._create_connection
        self._create_connection = lambda *a, **k: deadline.watch(create(*a, **k))


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTP, deadline=self._deadline), req)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._deadline = deadline
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        opener = functools.partial(_WatchedHTTPS, deadline=self._deadline)
        return self.do_open(opener, req, context=self._tls)  # type: ignore[arg-type]


def _file_answer(url: str, limit: int) -> Answer:
    """A file: URL as an index answers it; a folder stands for its index.html."""
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
    if path.is_dir():
        path = path / "index.html"
    try:
        body = read_regular_bytes(path, limit, follow_symlinks=True)  # the user's own URL: a link is theirs
    except UnreadableFile as why:
        raise OSError(f"{path} {why}") from None
    return Answer(200, "text/html", None, body)


def fetch(
    url: str,
    *,
    deadline_s: float,
    limit: int,
    timeout_s: float | None = None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    proxy: str | None = None,
) -> Answer:
    """`url`'s answer, all of it within `deadline_s` and at most `limit` bytes of body.

    DeadlinePassed or AnswerTooLarge (both OSError) past those; urllib's HTTPError for an error
    status; any other failure an OSError with the reason. `timeout_s` bounds each wait as urllib's
    timeout does (default: the deadline)."""
    if url.startswith("file:"):
        return _file_answer(url, limit)
    deadline = _Deadline()
    timer = threading.Timer(deadline_s, deadline.expire)
    timer.daemon = True
    handlers: list[urllib.request.BaseHandler] = [_HTTPHandler(deadline), _HTTPSHandler(deadline, context)]
    if proxy:
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    request = urllib.request.Request(url, method=method, headers={"User-Agent": "casekit", **(headers or {})})
    timer.start()
    try:
        with urllib.request.build_opener(*handlers).open(
            request, timeout=min(timeout_s or deadline_s, deadline_s)
        ) as reply:
            body = reply.read(limit + 1)
            answer = Answer(reply.status, reply.headers.get_content_type(), reply.headers.get_content_charset(), body)
    except (OSError, http.client.HTTPException, ValueError) as error:
        if deadline.expired.is_set():
            raise DeadlinePassed(f"no whole answer within {deadline_s:g} s") from None
        if isinstance(error, http.client.HTTPException):  # a broken answer: no OSError of its own
            raise ConnectionError(f"a broken HTTP answer ({type(error).__name__})") from None
        raise
    finally:
        timer.cancel()
        deadline.close()
    if deadline.expired.is_set():  # a close-delimited body cut short by the deadline reads as complete
        raise DeadlinePassed(f"no whole answer within {deadline_s:g} s")
    if len(answer.body) > limit:
        raise AnswerTooLarge(f"the answer is larger than {limit} bytes: not an index page")
    return answer
