"""A threaded HTTP server on loopback serving a folder with Range support, for loader tests.

It can throttle each response (bytes per second) and inject seeded faults: error statuses,
connection resets, stalls and truncated bodies. It counts GET requests per path.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Faults:
    """Share of requests that fail in each way, drawn from a seeded generator."""

    error_rate: float = 0.0
    reset_rate: float = 0.0
    stall_rate: float = 0.0
    truncate_rate: float = 0.0
    stall_seconds: float = 3.0
    seed: int = 0
    injected: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self) -> str | None:
        with self._lock:
            x = self._rng.random()
            for kind, rate in (
                ("error", self.error_rate),
                ("reset", self.reset_rate),
                ("stall", self.stall_rate),
                ("truncate", self.truncate_rate),
            ):
                if x < rate:
                    self.injected[kind] += 1
                    return kind
                x -= rate
        return None


class FolderServer:
    def __init__(self, root: Path, rate: float | None = None, faults: Faults | None = None):
        self.root, self.rate, self.faults = Path(root), rate, faults or Faults()
        self.gets: Counter = Counter()
        self.range_gets: Counter = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, head_only: bool):
                path = server.root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                start, end, status = 0, len(data), 200
                if "Range" in self.headers:
                    a, b = self.headers["Range"].split("=", 1)[1].split("-")
                    start, end, status = int(a), min(len(data), int(b) + 1), 206
                if not head_only:
                    server.gets[self.path] += 1
                    if status == 206:
                        server.range_gets[self.path] += 1
                    fault = server.faults.draw()
                    if fault == "error":
                        self.send_response(random.choice([500, 503, 429]))
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    if fault == "reset":
                        self.connection.close()
                        return
                    if fault == "stall":
                        time.sleep(server.faults.stall_seconds)
                    if fault == "truncate":
                        end = start + (end - start) // 2
                        self.send_response(status)
                        self.send_header("Content-Length", str(2 * (end - start) + 1))
                        self.end_headers()
                        self.wfile.write(data[start:end])
                        self.close_connection = True
                        return
                self.send_response(status)
                self.send_header("Content-Length", str(end - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if head_only:
                    return
                body, chunk = memoryview(data)[start:end], 64 << 10
                for i in range(0, len(body), chunk):
                    self.wfile.write(body[i : i + chunk])
                    if server.rate:
                        time.sleep(min(chunk, len(body) - i) / server.rate)

            def do_GET(self):
                self._send(False)

            def do_HEAD(self):
                self._send(True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FolderServer:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
