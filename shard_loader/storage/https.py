"""A dataset root served over plain HTTP(S): a public bucket or custom domain, read with Range requests.

Standard library only. Keys are percent-quoted into the URL and refused when their decoded
form could leave the dataset root; `timeout` is the connect and per-read stall timeout.
"""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote

from ..errors import NotFoundError, StoreError, TransientStoreError
from ..format import check_key
from .retry import RequestStats, RetryPolicy, retried
from .transfer import MAX_OBJECT_BYTES, check_range_answer, check_size, collect, iter_body

TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
HINTS = {
    401: "; the server wants credentials: use the bucket's public URL, or s3:// / r2:// with keys",
    403: "; the server refuses access: check the URL and the bucket's public-access settings",
    404: "; check the URL and that the dataset is published there",
}
NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError)


class HttpStore:
    def __init__(self, root_url: str, timeout: float = 30.0):
        self.url = root_url.rstrip("/")
        self.timeout = timeout
        self.retry, self.stats = RetryPolicy(), RequestStats()

    def _url(self, key: str) -> str:
        """The key's URL, percent-quoted; a key that decodes to `..` or an absolute path is refused, never sent."""
        where = f"key under {self.url}"
        check_key(key, where)
        check_key(unquote(key), f"{where} (percent-decoded {key!r})")
        return f"{self.url}/{quote(key, safe='/')}"

    @contextmanager
    def _open(self, key: str, headers: dict[str, str], method: str = "GET") -> Iterator[http.client.HTTPResponse]:
        url = self._url(key)
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers, method=method), timeout=self.timeout
            ) as response:
                yield response
        except urllib.error.HTTPError as exc:
            transient = exc.code in TRANSIENT_STATUS
            error = TransientStoreError if transient else NotFoundError if exc.code == 404 else StoreError
            raise error(f"{url}: HTTP {exc.code} {exc.reason}{HINTS.get(exc.code, '')}") from None
        except NETWORK_ERRORS as exc:
            raise TransientStoreError(f"{url}: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _length(response: http.client.HTTPResponse) -> int | None:
        value = response.headers.get("Content-Length")
        return int(value) if value is not None and value.isdigit() else None

    @retried("get")
    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        where = f"{self.url}/{key}"
        with self._open(key, {}) as response:
            length = self._length(response)
            check_size(where, length, limit)
            return collect(iter_body(response.read1, length, where, NETWORK_ERRORS, limit), where)

    @retried("head")
    def size(self, key: str) -> int:
        with self._open(key, {}, method="HEAD") as response:
            length = self._length(response)
        if length is None:
            raise StoreError(f"{self.url}/{key}: the server sent no Content-Length")
        return length

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        with self._open(key, {"Range": f"bytes={start}-{end - 1}"}) as response:
            where = f"{self.url}/{key}"
            check_range_answer(where, response.status, self._length(response), start, end)
            yield from iter_body(response.read1, end - start, where, NETWORK_ERRORS)

    def local_path(self, key: str) -> Path | None:
        return None
