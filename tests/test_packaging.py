"""Packaging shows the architecture: a researcher installs the loader's distribution alone (numpy only) and
gets `shard_loader` and the `shard-loader` command, never `shard_assets` or a `shard-assets` command that
needs Dagster; a missing extra is one line naming it; the builder's distribution pulls the loader's in.

Each install is into a fresh virtualenv, from this repository's files, as the README says (uv here, the
same resolver `scripts/setup` uses; numpy and the builder's dependencies come from the package index or
uv's cache)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.patience import HUNG

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def _uv() -> str:
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv, "uv is not installed: scripts/setup installs it"
    return uv


def _fresh_venv(path: Path, *requirements: str) -> Path:
    """A new virtualenv at `path` with `requirements` installed (rebuilt from the working tree, never a cached
    wheel)."""
    uv = _uv()
    subprocess.run([uv, "venv", "-q", str(path), "-p", sys.executable], check=True, timeout=HUNG)
    refresh = ["--refresh-package", "shard-loader", "--refresh-package", "shard-assets"]
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(path / "bin" / "python"), *refresh, *requirements],
        check=True,
        timeout=HUNG,
    )
    return path / "bin"


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=HUNG)


def _installed(bin_dir: Path, cwd: Path) -> dict:
    """What the venv holds: importable packages, the loader distribution's top-level entries, requirements."""
    code = (
        "import importlib.util as u, importlib.metadata as m, json\n"
        "def top(d):\n"
        "    return sorted({str(f).split('/')[0] for f in m.files(d) if not str(f).startswith('..')})\n"
        "def have(d):\n"
        "    try:\n        return m.requires(d) or []\n    except m.PackageNotFoundError:\n        return None\n"
        "print(json.dumps({'shard_loader': u.find_spec('shard_loader') is not None,"
        " 'shard_assets': u.find_spec('shard_assets') is not None,"
        " 'loader_top': top('shard-loader'), 'loader_requires': have('shard-loader'),"
        " 'builder_requires': have('shard-assets')}))"
    )
    out = _run([str(bin_dir / "python"), "-c", code], cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_loader_installs_alone_with_numpy_and_names_the_extra_a_missing_dependency_needs(tmp_path):
    bin_dir = _fresh_venv(tmp_path / "venv", str(ROOT / "loader"))
    got = _installed(bin_dir, tmp_path)  # run from tmp_path: the repository's folders are not on sys.path
    assert got["shard_loader"] and not got["shard_assets"]
    assert got["loader_top"] == [
        "shard_loader",
        "shard_loader-0.1.0.dist-info",
    ]  # no tests/, benchmarks/, shard_assets/
    assert [r.split(";")[0].strip() for r in got["loader_requires"] if "extra ==" not in r] == ["numpy>=1.24"]
    assert got["builder_requires"] is None
    assert (bin_dir / "shard-loader").exists() and not (bin_dir / "shard-assets").exists()
    assert _run([str(bin_dir / "shard-loader"), "--help"], tmp_path).returncode == 0

    info = _run([str(bin_dir / "shard-loader"), "info", "r2://bucket/datasets/demo"], tmp_path)
    assert info.returncode == 2 and info.stdout == ""
    assert info.stderr.splitlines() == [
        "error: an s3:// or r2:// store needs boto3, which is not installed: pip install 'shard-loader[s3]'"
    ]

    imported = _run([str(bin_dir / "python"), "-c", "import shard_loader.torch_dataset"], tmp_path)
    assert imported.returncode == 1
    assert imported.stderr.splitlines()[-1] == (
        "shard_loader.errors.MissingExtraError: shard_loader.torch_dataset needs torch, which is not installed: "
        "pip install 'shard-loader[torch]'"
    )
    caught = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "try:\n    import shard_loader.torch_dataset\nexcept ImportError as e:\n    print(e.name)",
        ],
        tmp_path,
    )
    assert caught.stdout.strip() == "torch"  # an ImportError, as code that tries optional imports expects


def test_an_editable_install_of_the_loader_exposes_its_package_and_nothing_else_of_the_repository(tmp_path):
    """A researcher hacking on the loader installs it editable: the working tree's shard_loader imports (an edit shows
    at once), and neither the builder nor the repository's tests do, as with the wheel."""
    bin_dir = _fresh_venv(tmp_path / "venv", "-e", str(ROOT / "loader"))
    got = _installed(bin_dir, tmp_path)
    assert got["shard_loader"] and not got["shard_assets"]
    where = _run([str(bin_dir / "python"), "-c", "import shard_loader; print(shard_loader.__file__)"], tmp_path)
    assert Path(where.stdout.strip()).resolve() == (ROOT / "shard_loader" / "__init__.py").resolve()
    tests = _run([str(bin_dir / "python"), "-c", "import tests.support"], tmp_path)
    assert tests.returncode == 1 and "No module named 'tests'" in tests.stderr


def test_the_builder_installs_with_the_loader_distribution_as_a_dependency(tmp_path):
    bin_dir = _fresh_venv(tmp_path / "venv", str(ROOT))
    got = _installed(bin_dir, tmp_path)
    assert got["shard_loader"] and got["shard_assets"]
    assert any(r.startswith("shard-loader[s3]") for r in got["builder_requires"]), got["builder_requires"]
    assert got["loader_top"] == [
        "shard_loader",
        "shard_loader-0.1.0.dist-info",
    ]  # the loader's own distribution, not a copy in the builder's
    assert _run([str(bin_dir / "shard-assets"), "--help"], tmp_path).returncode == 0
    defs = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import shard_assets.definitions as d; print(len(d.defs().resolve_asset_graph().get_all_asset_keys()))",
        ],
        tmp_path,
    )
    assert defs.returncode == 0 and int(defs.stdout) >= 5, defs.stderr  # Dagster, pyarrow, tokenizers came with it
    assert _run([str(bin_dir / "shard-loader"), "--help"], tmp_path).returncode == 0


def test_scripts_demo_says_what_it_is_doing_before_its_setup_installs_anything(tmp_path):
    """Issue 47, item 13: the first run of `scripts/demo` printed nothing for the minutes `scripts/setup` spent making
    .venv. Run in a copy of the scripts whose `uv` and `.venv` are stand-ins that only say when they start."""
    (tmp_path / "scripts").mkdir()
    for name in ("demo", "setup"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    bin_dir, venv_bin = tmp_path / "bin", tmp_path / ".venv" / "bin"
    bin_dir.mkdir()
    venv_bin.mkdir(parents=True)
    for folder, name in ((bin_dir, "uv"), (venv_bin, "python"), (venv_bin, "shard-assets")):
        (folder / name).write_text(f'#!/bin/sh\necho "{name} $1 $2"\n')
        (folder / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        ["scripts/demo"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=HUNG,
    )
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("scripts/setup: installing both packages")]
    assert said and said[0] < lines.index("uv pip uninstall"), lines  # said before the first install step
    assert "scripts/setup: compiling bytecode" in lines and lines[-1] == "shard-assets build --spec", lines
