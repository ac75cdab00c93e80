"""The plan step estimates documents and tokens from a sample, close to what the build produces."""

import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.lib.plan import format_plan, plan_build
from shard_assets.lib.spec import TokenizerSpec, load_spec
from shard_assets.lib.encoding import encode_documents
from shard_assets.lib.tokenizer import build_tokenizer, load_tokenizer
from tests.support.dagster_helpers import write_jsonl
from tests.support.patience import HUNG


def test_estimates_are_close_to_the_truth(tmp_path):
    (tmp_path / "src").mkdir()
    for i in range(2):
        write_jsonl(tmp_path / "src" / f"f{i}.jsonl", 600, seed=i)
    texts = [f"parquet document {i} " + "lorem ipsum dolor " * (i % 30) for i in range(700)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "src" / "p.parquet")
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        f'name = "p"\n[[sources]]\nname = "j"\nuri = "{tmp_path}/src/*.jsonl"\nformat = "jsonl"\n'
        f'[[sources]]\nname = "q"\nuri = "{tmp_path}/src/*.parquet"\n'
    )
    spec = load_spec(spec_path)
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(texts))
    tok = load_tokenizer(text)
    plan = plan_build(spec, tok, record.token_dtype, sample_documents=60)
    by_key = {f.file.partition_key: f for f in plan.files}
    assert by_key["q.p"].documents == 700  # exact, from the parquet footer
    truth = len(encode_documents(tok, texts, 0, "uint16")[0])
    assert abs(by_key["q.p"].tokens - truth) / truth < 0.5
    for key in ("j.f0", "j.f1"):
        assert abs(by_key[key].documents - 600) / 600 < 0.25
    assert plan.output_bytes > 2 * plan.tokens and plan.seconds > 0
    assert not any(f.exact for f in plan.files)  # every file is larger than the sample: all extrapolated


def test_a_file_read_whole_by_the_sample_is_exact_and_unmarked(tmp_path):
    write_jsonl(tmp_path / "small.jsonl", 40, seed=4)
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        f'name = "p"\nmin_chars = 1\n[[sources]]\nname = "j"\nuri = "{tmp_path}/small.jsonl"\nformat = "jsonl"\n'
    )
    texts = [f"document {i} alpha beta" for i in range(50)]
    text, record = build_tokenizer(TokenizerSpec(vocab_size=300), iter(texts))
    tok = load_tokenizer(text)
    plan = plan_build(load_spec(spec_path), tok, record.token_dtype, sample_documents=100)
    (only,) = plan.files
    assert only.exact and only.documents == 40
    assert format_plan(plan).splitlines()[1].split()[1] == "40"  # no ~ before an exact count


def test_plan_command_prints_totals(demo_spec):
    out = subprocess.run(
        [sys.executable, "-m", "shard_assets.cli", "plan", "--spec", str(demo_spec), "--sample", "20"],
        capture_output=True,
        text=True,
        timeout=HUNG,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "total" in out.stdout and "core-hours" in out.stdout and "stdlib.part-000" in out.stdout


@pytest.mark.integration
def test_a_file_that_cannot_be_read_is_listed_and_the_others_planned_as_the_build_would(tmp_path):
    write_jsonl(tmp_path / "good.jsonl", 40, seed=4)
    (tmp_path / "broken.jsonl").write_text('{"text": "fine line"}\n{not json}\n')
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        f'name = "p"\nmin_chars = 1\n[[sources]]\nname = "j"\nuri = "{tmp_path}/*.jsonl"\nformat = "jsonl"\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "shard_assets.cli", "plan", "--spec", str(spec_path), "--sample", "20"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "j.good" in out.stdout and "skipped        1 files" in out.stdout
    assert re.search(r"j.broken\s+.*broken.jsonl:2: not a JSON object", out.stdout), out.stdout


def test_sizes_read_with_units():
    from shard_assets.lib.plan import human_bytes

    assert [human_bytes(n) for n in (999, 569_395, 2.5e9, 7.3e15)] == ["999.0 B", "569.4 kB", "2.5 GB", "7.3 PB"]
