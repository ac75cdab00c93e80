"""Loopback HTTP servers that misbehave the way real ones do: the standard library's file server (no Range
support: it answers 200 with the whole file) and a server that trickles its body one byte at a time."""

from __future__ import annotations

import functools
import threading
import time
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _QuietHTTPServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client that hangs up mid-body (as the loader does on a 200 to a ranged GET) is expected here."""


class _Server:
    """A ThreadingHTTPServer on a free loopback port, served from a daemon thread, as a context manager."""

    def __init__(self, handler):
        self.httpd = _QuietHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.requests: list[str] = []

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class NoRangeServer(_Server):
    """`python -m http.server` for a folder: Range headers are ignored, every GET is a 200 with the whole file."""

    def __init__(self, root: Path):
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args):
                server.requests.append(f"{self.command} {self.path} range={self.headers.get('Range')}")

        super().__init__(functools.partial(Handler, directory=str(root)))


class TrickleServer(_Server):
    """Announces `size` bytes for any path, then sends one byte every `interval` seconds (at most `size` bytes)."""

    def __init__(self, size: int, interval: float):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                self.send_response(206 if "Range" in self.headers else 200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                for _ in range(size):  # bounded: ends when the body is sent or the client hangs up
                    try:
                        self.wfile.write(b"x")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(interval)

        super().__init__(Handler)
