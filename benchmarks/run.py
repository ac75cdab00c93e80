"""Run every benchmark (benchmarks/bench_*.py), write results.json and RESULTS.md.

python -m benchmarks.run --size small [--only tokenize,loader] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .machine import machine_info
from .sizes import get_size

HERE = Path(__file__).parent


def discover() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        (
            f"Measured {m['date']} on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']} "
            f"(size `{results['size']}`)."
        ),
        "",
        "| benchmark | figure | value | target |",
        "|---|---|---|---|",
    ]
    for name, result in results["benchmarks"].items():
        where = result.get("machine", m)
        if where["cpu"] != m["cpu"]:  # kept from a run on another machine: say which, and when
            name = f"{name} ({where['cpu']}, {where['cores']} cores, {result.get('measured', where['date'])})"
        if "skipped" in result or "error" in result:
            lines.append(f"| {name} | — | {result.get('skipped') or 'error: ' + result['error'].splitlines()[-1]} | |")
            continue
        for row in result.get("summary", []):
            lines.append(f"| {name} | {row['figure']} | {row['value']} | {row.get('target', '')} |")
    return "\n".join(lines) + "\n"


def write_result(out: Path, result: dict, widths: tuple[int, int]) -> None:
    """One benchmark's result as its `main` writes it, its summary printed in columns of `widths`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["summary"]:
        print(f"{row['figure']:<{widths[0]}} {row['value']:<{widths[1]}} {row.get('target', '')}")


def bench_main(name: str, run: Callable[..., dict], doc: str | None, reps: int, widths: tuple[int, int]) -> int:
    """The command of a benchmark run by size and repetitions, `python -m benchmarks.bench_<name> --size S --reps N`:
    its result in benchmarks/results/<name>.json with the machine and the load average before and after."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.bench_{name}", description=doc)
    parser.add_argument("--size", default="small", help="small, medium or large")
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--out", type=Path, default=HERE / "results" / f"{name}.json")
    parser.add_argument("--work", type=Path, default=HERE / "results" / "work" / name)
    args = parser.parse_args()
    before = os.getloadavg()[0]
    result = run(args.size, args.work, args.reps)
    result.update(machine=machine_info(), load_average=[round(before, 1), round(os.getloadavg()[0], 1)])
    write_result(args.out, result, widths)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--size", default="small", help="small, medium or large")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    size = get_size(args.size)
    names = [n for n in discover() if not args.only or n in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"size": size.name, "machine": machine_info(), "benchmarks": {}}
    previous = args.out / "results.json"
    if (
        args.only and previous.exists()
    ):  # update some benchmarks, keep the others' latest figures, each with its machine
        kept = json.loads(previous.read_text())
        if kept.get("size") == size.name:
            results["benchmarks"] = {
                name: {"machine": kept["machine"], **result} for name, result in kept["benchmarks"].items()
            }
    for name in names:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        try:
            result = importlib.import_module(f"benchmarks.bench_{name}").run(size, args.out / "work" / name)
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            result = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"}
        result["seconds"] = round(time.perf_counter() - started, 1)
        result["measured"] = results["machine"]["date"]
        result["machine"] = results["machine"]
        results["benchmarks"][name] = result
        for row in result.get("summary", []):
            print(f"   {row['figure']}: {row['value']}  {row.get('target', '')}", flush=True)
        if "skipped" in result or "error" in result:
            print(f"   {result.get('skipped') or result['error']}", flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "RESULTS.md").write_text(markdown(results))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'RESULTS.md'}")
    return 0 if all("error" not in r for r in results["benchmarks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
