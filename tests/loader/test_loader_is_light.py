"""shard_loader stays light: importing it pulls in numpy and the standard library only; the code location loads
near-dedup's scipy only when used."""

import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("dagster", "polars", "transformers", "shard_assets", "torch", "boto3", "pyarrow", "tokenizers")


def test_importing_shard_loader_loads_no_heavy_dependency():
    code = "import sys, shard_loader; print(','.join(m for m in %r if m in sys.modules))" % (FORBIDDEN,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_no_module_imports_the_builder_side():
    root = Path(__file__).resolve().parents[2] / "shard_loader"
    for path in root.rglob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                assert words[1].split(".")[0] not in ("dagster", "polars", "transformers", "shard_assets"), (
                    f"{path.name}: {line}"
                )


def test_the_code_location_loads_near_dedup_only_when_a_spec_asks_for_it():
    """datasketch pulls in scipy (0.5 s of every process that loads the definitions: each build worker, each code
    server); exact dedup, the default, never needs it."""
    heavy = ("datasketch", "scipy")
    code = "import sys, shard_assets.definitions; print(','.join(m for m in %r if m in sys.modules))" % (heavy,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
