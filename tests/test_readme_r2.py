"""The README's R2 section, run verbatim (placeholders filled in) against a real S3 server (SeaweedFS on
loopback) with only the variables it names: the build with the write keys alone exits 0, prints the summary
and passes every check; the trainer side fetches and verifies with the read-only keys."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.dagster_helpers import publish_checks
from tests.support.seaweedfs import READER, WRITER, cli_build
from tests.support.patience import HUNG

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "readme-bucket"


def readme_block(marker: str) -> str:
    """The bash block that follows `<!-- marker -->` in the README."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- {marker} -->\n```bash\n(.*?)```", text, re.S)
    assert found, f"README has no bash block after <!-- {marker} -->"
    return found.group(1)


def _run(block: str, values: dict[str, str], env: dict[str, str]) -> subprocess.CompletedProcess:
    for placeholder, value in values.items():
        block = block.replace(f"<{placeholder}>", value)
    assert "<" not in block, block
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True, text=True, timeout=HUNG
    )


def test_the_readme_r2_commands_build_and_read_back(seaweed, tmp_path):
    seaweed.create_bucket(BUCKET)
    (ROOT / "data" / "demo").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(ROOT / ".venv/bin/shard-assets"), "demo", "--folder", "data/demo"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("R2_", "AWS_", "DATASET_", "S3_"))}
    env = {
        **clean,
        "S3_ENDPOINT_URL": seaweed.url,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    (tmp_path / "home").mkdir()
    values = {
        "account id": "0123456789abcdef0123456789abcdef",
        "bucket": BUCKET,
        "write key id": WRITER[0],
        "write secret": WRITER[1],
        "read key id": READER[0],
        "read secret": READER[1],
    }
    build = _run(readme_block("r2-build"), values, env)
    assert build.returncode == 0, build.stderr[-3000:]
    assert f"s3://{BUCKET}/datasets/demo/manifest.json" in build.stdout
    n = publish_checks()
    assert re.search(rf"^checks\s+{n} of {n} passed$", build.stdout, re.M), build.stdout
    assert re.search(r"^first batch\s+input_ids \(4, 128\) int64", build.stdout, re.M)
    read = _run(readme_block("r2-read"), values, env)
    assert read.returncode == 0, read.stderr[-3000:]
    for secret in (WRITER[1], READER[1], WRITER[0], READER[0]):
        assert secret not in build.stdout + build.stderr + read.stdout + read.stderr


def test_s3_raw_sources_are_listed_and_read_with_the_stores_keys(seaweed, tmp_path):
    seaweed.create_bucket("raw-corpus")
    seaweed.create_bucket("built")
    writer = seaweed.client(WRITER)
    for i in range(2):
        body = "".join(
            f'{{"text": "document {i}-{j}: a few words about object stores and tokens"}}\n' for j in range(120)
        )
        writer.put_object(Bucket="raw-corpus", Key=f"corpus/part-{i}.jsonl", Body=body.encode())
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "s3raw"\nval_fraction = 0.2\nmin_chars = 10\n[tokenizer]\nvocab_size = 300\n'
        '[[sources]]\nname = "web"\nuri = "s3://raw-corpus/corpus/*.jsonl"\nformat = "jsonl"\nallow_unbounded = true\n'
    )
    settings = {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "DATASET_STORE": "r2",
        "S3_ENDPOINT_URL": seaweed.url,
        "R2_DATASET_ACCOUNT_ID": "0123456789abcdef0123456789abcdef",
        "R2_DATASET_BUCKET_NAME": "built",
        "DATASET_BINS_PATH": "s3raw",
        "R2_DATASET_WRITE_ACCESS_KEY_ID": WRITER[0],
        "R2_DATASET_WRITE_SECRET_ACCESS_KEY": WRITER[1],
    }
    out = cli_build(spec, tmp_path, settings)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^partitions\s+2 \(0 left out", out.stdout, re.M), out.stdout
    assert WRITER[1] not in out.stdout + out.stderr
