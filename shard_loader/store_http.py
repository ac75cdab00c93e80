"""A dataset root served over plain HTTP(S): a public bucket or custom domain, read with Range requests.

Standard library only.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from pathlib import Path

from .errors import StoreError, TransientStoreError
from .format import check_key

TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class HttpStore:
    def __init__(self, root_url: str, timeout: float = 30.0, **_ignored):
        self.url = root_url.rstrip("/")
        self.timeout = timeout

    def _get(self, key: str, headers: dict[str, str], method: str = "GET") -> tuple[bytes, dict[str, str]]:
        url = f"{self.url}/{check_key(key, f'key under {self.url}')}"
        request = urllib.request.Request(url, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read(), dict(response.headers)
        except urllib.error.HTTPError as exc:
            if exc.code in TRANSIENT_STATUS:
                raise TransientStoreError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            raise StoreError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as exc:
            raise TransientStoreError(f"{url}: {type(exc).__name__}: {exc}") from None

    def read_bytes(self, key: str) -> bytes:
        body, headers = self._get(key, {})
        expected = headers.get("Content-Length")
        if expected is not None and int(expected) != len(body):
            raise TransientStoreError(f"{self.url}/{key}: short read, {len(body)} of {expected} bytes")
        return body

    def size(self, key: str) -> int:
        _, headers = self._get(key, {}, method="HEAD")
        if "Content-Length" not in headers:
            raise StoreError(f"{self.url}/{key}: the server sent no Content-Length")
        return int(headers["Content-Length"])

    def read_range(self, key: str, start: int, end: int) -> bytes:
        body, headers = self._get(key, {"Range": f"bytes={start}-{end - 1}"})
        if len(body) != end - start:
            raise TransientStoreError(f"{self.url}/{key}: short read, {len(body)} of {end - start} bytes at {start}")
        return body

    def local_path(self, key: str) -> Path | None:
        return None
