"""What machine a result came from."""

from __future__ import annotations

import os
import platform
from datetime import datetime, UTC
from importlib.metadata import PackageNotFoundError, version


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict:
    packages = {}
    for name in ("numpy", "tokenizers", "pyarrow", "dagster", "torch", "boto3"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": packages,
    }


PEAK_RSS_SNIPPET = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) * 1024"
"""Peak RSS of the current process in bytes. Unlike ru_maxrss, VmHWM starts afresh at exec, so a
child started from a large parent reports its own peak."""
