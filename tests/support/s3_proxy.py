"""Loopback S3 for tests: moto's ThreadedMotoServer behind a small HTTP proxy.

The proxy behaves like R2 where it matters (it answers 501 to requests carrying
x-amz-checksum-* headers or aws-chunked bodies), counts requests per object key, and
injects seeded faults (error statuses, resets, stalls, truncated bodies) into GETs. It can
play each way a server treats a conditional put (If-None-Match): honour it, ignore it, or
answer 501 or 400 to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
import http.client
import logging
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.http_server import Faults
from tests.support.patience import HUNG

ACCESS_KEY, SECRET_KEY = "AKIATESTKEY0000001", "testsecret/0000000000000000000000000000001"


class PutGate:
    """Holds the first PUT whose path contains `fragment` until `release`, then refuses it (503) without writing:
    a test kills the writer while its upload waits, and the write never lands. `held` is set once a PUT waits;
    `client` is the writer's (host, port), which names its process."""

    def __init__(self, fragment: str, timeout: float = HUNG):
        self.fragment, self.timeout = fragment, timeout
        self.held, self.release = threading.Event(), threading.Event()
        self.client: tuple[str, int] | None = None
        self._lock = threading.Lock()

    def holds(self, path: str, client: tuple[str, int]) -> bool:
        with self._lock:
            if self.fragment not in path or self.held.is_set():
                return False
            self.client = client
            self.held.set()
        self.release.wait(self.timeout)
        return True


class S3Proxy:
    def __init__(self, upstream_port: int, faults: Faults | None = None):
        self.upstream_port, self.faults = upstream_port, faults or Faults()
        self.gets: Counter = Counter()
        self.rejected: Counter = Counter()
        self.multipart_uploads = 0
        self.fail_after: dict[str, int] = {}  # key -> GETs allowed before answering 403 for good
        self.conditional = (
            "honour"  # or "ignore" (drop If-None-Match), "501" or "400" (answer that to a request carrying it)
        )
        self.cut_gets = ""  # GETs of paths containing this send half their body, then close: a body cut mid-read
        self.cuts = 0
        self.hold_puts: threading.Event | None = None  # while set to an unset Event, PUTs wait for it
        self.fail_puts = ""  # PUTs to paths containing this answer 500
        self.gate: PutGate | None = None  # holds one PUT, then refuses it
        self.puts: list[str] = []  # paths of the PUTs forwarded to the server, in order
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() != "connection"
                }  # Host is signed: kept for servers that check SigV4
                if (
                    any(
                        k.lower().startswith("x-amz-checksum-") or k.lower() == "x-amz-sdk-checksum-algorithm"
                        for k in headers
                    )
                    or "aws-chunked"
                    in (self.headers.get("Content-Encoding", "") + self.headers.get("x-amz-content-sha256", "")).lower()
                ):
                    proxy.rejected[self.command] += 1
                    self._reply(
                        501,
                        b"<Error><Code>NotImplemented</Code>"
                        b"<Message>Header 'x-amz-checksum-crc32' with value is not implemented</Message></Error>",
                    )
                    return
                conditional = next((k for k in headers if k.lower() == "if-none-match"), None)
                if conditional and proxy.conditional == "501":
                    self._reply(
                        501,
                        b"<Error><Code>NotImplemented</Code>"
                        b"<Message>A header you provided implies functionality that is not implemented</Message>"
                        b"</Error>",
                    )
                    return
                if conditional and proxy.conditional == "400":
                    self._reply(
                        400,
                        b"<Error><Code>InvalidArgument</Code><Message>Invalid header If-None-Match</Message></Error>",
                    )
                    return
                if conditional and proxy.conditional == "ignore":
                    del headers[conditional]
                path = self.path.split("?", 1)[0]
                if self.command == "PUT":
                    if proxy.hold_puts is not None:
                        proxy.hold_puts.wait(HUNG)  # until the test lets it go, however slow the machine
                    if proxy.gate is not None and proxy.gate.holds(path, self.client_address):
                        self._reply(
                            503, b"<Error><Code>SlowDown</Code><Message>held by a test, then refused</Message></Error>"
                        )
                        return
                    if proxy.fail_puts and proxy.fail_puts in path:
                        self._reply(500, b"<Error><Code>InternalError</Code><Message>injected</Message></Error>")
                        return
                    proxy.puts.append(path)
                if self.command == "POST" and self.path.endswith("?uploads"):
                    proxy.multipart_uploads += 1
                if self.command == "GET" and "?" not in self.path:
                    proxy.gets[path] += 1
                    allowed = proxy.fail_after.get(path)
                    if allowed is not None and proxy.gets[path] > allowed:
                        self._reply(403, b"<Error><Code>AccessDenied</Code></Error>")
                        return
                    fault = proxy.faults.draw()
                    if proxy.cut_gets and proxy.cut_gets in path:
                        proxy.cut_gets, proxy.cuts, fault = (
                            "",
                            proxy.cuts + 1,
                            "truncate",
                        )  # once: the retry reads it whole
                    if fault == "error":
                        self._reply(503, b"<Error><Code>SlowDown</Code></Error>")
                        return
                    if fault == "reset":
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    if fault == "stall":
                        time.sleep(proxy.faults.stall_seconds)
                else:
                    fault = None
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for k, v in response.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                if fault == "truncate" and len(data) > 1:
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.close_connection = True
                    return
                length = response.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class LoopbackS3:
    """moto on a free loopback port with a proxy in front; `url` is the proxy's endpoint."""

    def __init__(self):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.moto.start()
        self.moto_url = f"http://127.0.0.1:{port}"
        self.proxy = S3Proxy(port)
        self.url = self.proxy.url

    def client(self, via_proxy: bool = True, **config):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url if via_proxy else self.moto_url,
            region_name="auto",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, **config),
        )

    def write_store(self, bucket: str, prefix: str):
        """The builder's S3ObjectStore on `bucket` under `prefix`, through the proxy with write keys, botocore's one
        attempt, and the store's own retries with short delays."""
        from shard_assets.lib.store.s3 import S3ObjectStore
        from shard_loader.storage.retry import RetryPolicy
        from shard_loader.storage.s3_client import make_s3_client

        client = make_s3_client(self.url, ACCESS_KEY, SECRET_KEY, role="write", retries=1)
        return S3ObjectStore(
            client, bucket, prefix, self.url, retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
        )

    def create_bucket(self, name: str) -> None:
        self.client(via_proxy=False).create_bucket(
            Bucket=name, CreateBucketConfiguration={"LocationConstraint": "auto"}
        )

    def close(self) -> None:
        self.proxy.close()
        self.moto.stop()


@contextlib.contextmanager
def loopback_s3_with_bucket(bucket: str) -> Iterator[LoopbackS3]:
    """A LoopbackS3 (moto behind the R2-like proxy) holding `bucket`, closed afterwards."""
    server = LoopbackS3()
    try:
        server.create_bucket(bucket)
        yield server
    finally:
        server.close()


def bucket_fixture(bucket: str) -> Callable[[], Iterator[LoopbackS3]]:
    """A module-scoped pytest fixture: a loopback S3 holding `bucket`, for the tests of one module."""

    @pytest.fixture(scope="module")
    def s3() -> Iterator[LoopbackS3]:
        with loopback_s3_with_bucket(bucket) as server:
            yield server

    return s3
