"""Download speed, side by side in one run, against nginx on loopback with a per-connection cap
(object stores cap each stream; 25 MB/s is a fair stand-in): this loader's https/http path at
its defaults, sha256 included, against one plain GET, and the uncapped loopback speed."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from shard_loader.cache.download import DEFAULT_CONFIG, download_file
from shard_loader.format import FileRef
from shard_loader.storage.retry import RequestStats
from shard_loader.storage.https import HttpStore

CAP_MB = 25

NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    sendfile on;
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
    server {{ listen 127.0.0.1:{capped}; root {root}; limit_rate {cap}m; }}
    server {{ listen 127.0.0.1:{uncapped}; root {root}; }}
}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_get(url: str, dest: Path) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url) as r, open(dest, "wb") as f:
        shutil.copyfileobj(r, f, 8 << 20)
    return time.perf_counter() - started


def run(size, work: Path) -> dict:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        return {"skipped": "nginx is not installed (apt-get install nginx-light)"}
    work.mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    root = work / "www"
    root.mkdir(exist_ok=True)
    blob = root / "shard.bin"
    if not blob.exists() or blob.stat().st_size != size.download_mb << 20:
        with open(blob, "wb") as f:
            for _ in range(size.download_mb):
                f.write(os.urandom(1 << 20))
    ref = FileRef(key="shard.bin", size=blob.stat().st_size, sha256=hashlib.sha256(blob.read_bytes()).hexdigest())
    capped, uncapped = _port(), _port()
    (work / "nginx.conf").write_text(
        NGINX_CONF.format(work=work, root=root, capped=capped, uncapped=uncapped, cap=CAP_MB)
    )
    proc = subprocess.Popen(
        [nginx, "-c", str(work / "nginx.conf"), "-e", str(work / "nginx-error.log")], start_new_session=True
    )
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{uncapped}/shard.bin", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        stats = RequestStats()
        started = time.perf_counter()
        download_file(HttpStore(f"http://127.0.0.1:{capped}"), ref, out / "loader" / "shard.bin", DEFAULT_CONFIG, stats)
        loader_s = time.perf_counter() - started
        single_s = _single_get(f"http://127.0.0.1:{capped}/shard.bin", work / "single.bin")
        uncapped_s = _single_get(f"http://127.0.0.1:{uncapped}/shard.bin", work / "uncapped.bin")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        for name in ("single.bin", "uncapped.bin"):
            (work / name).unlink(missing_ok=True)
        shutil.rmtree(work / "out", ignore_errors=True)
    mb = ref.size / 1e6
    loader, single, loopback = mb / loader_s, mb / single_s, mb / uncapped_s
    bound = min(DEFAULT_CONFIG.concurrency * CAP_MB * 1.048576, loopback)
    return {
        "file_mb": round(mb),
        "cap_mb_per_connection": CAP_MB,
        "concurrency": DEFAULT_CONFIG.concurrency,
        "part_mb": DEFAULT_CONFIG.part_size / 2**20,
        "loader_mb_s": round(loader, 1),
        "single_get_mb_s": round(single, 1),
        "uncapped_loopback_mb_s": round(loopback, 1),
        "requests": stats.as_dict(),
        "summary": [
            {
                "figure": "loader (defaults, sha256 included), MB/s",
                "value": f"{loader:.0f} = {loader / bound:.2f} of min(concurrency x cap, loopback) = {bound:.0f}",
                "target": ">= 0.8",
            },
            {
                "figure": "loader / single GET",
                "value": f"{loader / single:.1f}x ({single:.0f} MB/s single GET)",
                "target": ">= 6x",
            },
            {"figure": "uncapped loopback single GET, MB/s", "value": f"{loopback:.0f}"},
        ],
    }
