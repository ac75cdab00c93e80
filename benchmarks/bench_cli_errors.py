"""How fast `shard-assets` refuses a mistake (#33: one line within 1 s on a quiet machine): wall and CPU seconds of
the CLI, as a user types it, for mistakes that need the spec, the settings or argparse, interleaved in each
repetition with `python -c "import dagster"` (what every such error cost before the CLI checked first). Run alone:
python -m benchmarks.bench_cli_errors [--repeat 7]; it prints one line per mistake and the machine with its load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .machine import machine_info

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
MISTAKES = [
    "shard-assets biuld",
    "shard-assets build --store notes.txt",
    "shard-assets build --spec typo.toml",
    "shard-assets build --spec extra.toml",
    "shard-assets mix --spec blend.toml",
    "shard-assets dev --port 70000",
]
BASELINE = f"{sys.executable} -c 'import dagster'"


def _project(folder: Path) -> None:
    """A project folder with the mistaken files the commands above name."""
    for name in ("workspace.yaml", "dagster.yaml"):
        (folder / name).write_text((ROOT / name).read_text())
    (folder / "notes.txt").write_text("not a folder\n")
    (folder / "typo.toml").write_text('name = "web"\n[[sources]\n')
    (folder / "extra.toml").write_text('name = "web"\nmax_docs = 3\n[[sources]]\nuri = "*.jsonl"\n')
    (folder / "blend.toml").write_text('name = "blend"\n[[components]]\nmanifest = "web/manifest.json"\nweigth = 1\n')


def _time(command: str, cwd: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of the command and its children) and the exit status."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    env.pop("DAGSTER_HOME", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def run(size, work: Path, repeat: int = 5) -> dict:
    """Every mistake and the baseline, interleaved, `repeat` times; medians and the median ratio to the baseline."""
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as folder:
        project = Path(folder)
        _project(project)
        samples: dict[str, list[tuple[float, float, int]]] = {c: [] for c in [*MISTAKES, BASELINE]}
        loads = []
        for _ in range(repeat):
            loads.append(os.getloadavg()[0])
            for command in samples:
                samples[command].append(_time(command, project))
    base = samples[BASELINE]
    results, summary = [], []
    for command in MISTAKES:
        runs = samples[command]
        wall = statistics.median(w for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        ratio = statistics.median(w / b[0] for (w, _, _), b in zip(runs, base))
        results.append(
            {
                "command": command,
                "wall_s": wall,
                "cpu_s": cpu,
                "ratio_to_import_dagster": ratio,
                "exit": sorted({rc for _, _, rc in runs}),
            }
        )
        summary.append(
            {
                "figure": f"`{command}`: wall / CPU seconds (median), / `import dagster` beside it",
                "value": f"{wall:.2f} / {cpu:.2f} s, {ratio:.2f}",
                "target": "< 1 s wall, quiet machine",
            }
        )
    summary.append(
        {
            "figure": "`python -c 'import dagster'`: wall / CPU seconds (median)",
            "value": f"{statistics.median(w for w, _, _ in base):.2f} / "
            f"{statistics.median(c for _, c, _ in base):.2f} s",
        }
    )
    summary.append({"figure": "load average (1 min) during the runs", "value": f"{min(loads):.1f}-{max(loads):.1f}"})
    return {"results": results, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cli_errors")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    machine = machine_info()
    print(
        f"{machine['date']}: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"Python {machine['python']}"
    )
    out = run(None, ROOT / "benchmarks/results/work/cli_errors", args.repeat)
    for row in out["summary"]:
        print(f"{row['figure']}: {row['value']}")
    (ROOT / "benchmarks/results/cli_errors.json").write_text(json.dumps({"machine": machine, **out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
