"""Crash consistency: SIGKILL the build at explicit points (tokenizing, uploading, publishing) and the loader
after given batches, mid-download or mid-stream; no manifest ever references a missing, partial or
mismatched file, and restarts resume exactly."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import shard_loader
from tests.support.build_helpers import assert_every_manifest_whole, build_command
from tests.support.dagster_helpers import tiny_dataset, write_spec
from tests.support.http_server import FolderServer
from tests.support.patience import HUNG
from tests.support.synthetic import random_docs, write_dataset
import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]


def _build(tmp, spec, store):
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        build_command(spec, store),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


KILL_POINTS = (  # each attempt's build is SIGKILLed as soon as the store shows the next of these (keys, in build order)
    r"tokenizers/.+",  # the new tokenizer stored: tokenizing is next
    r"tokenized/[^/]+/(train|val)/.+\.npy",  # a first shard of the new tokenization uploaded, the others on their way
    r"tokenized/[^/]+/splits\.json",  # the splits recorded: the manifest is next
    r"manifests/[^/]+\.json",  # a version written: its checks and the promotion are next
)


def _kill_at(proc: subprocess.Popen, store: Path, point: str) -> bool:
    """SIGKILL the build's process group when a new file whose key matches `point` appears in the store; False
    if the build ended first. The store is polled: the kill lands at that point however slow the machine is."""
    before = set(store.rglob("*"))
    while proc.poll() is None:
        if any(re.fullmatch(point, p.relative_to(store).as_posix()) for p in set(store.rglob("*")) - before):
            os.killpg(proc.pid, signal.SIGKILL)
            return True
        time.sleep(0.01)
    return False


def test_sigkill_during_the_build_never_leaves_a_broken_manifest(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=3, docs=150)
    (tmp_path / "home").mkdir()
    (tmp_path / "home/dagster.yaml").symlink_to(
        ROOT / "dagster.yaml"
    )  # the project's limits: a kill mid-tokenize leaves a pool slot claimed
    kills = 0
    for attempt, point in enumerate(KILL_POINTS):
        write_spec(
            spec, f"{tmp_path}/src/*.jsonl", vocab_size=300 + 20 * attempt
        )  # each attempt publishes a new version
        proc = _build(tmp_path, spec, store)
        kills += _kill_at(proc, store, point)
        proc.wait()
        assert_every_manifest_whole(store)
    assert kills >= 3  # the last points are a moment before the build ends: one build may finish first
    proc = _build(tmp_path, spec, store)
    assert proc.wait(timeout=HUNG) == 0, proc.stderr.read().decode()[-2000:]
    assert assert_every_manifest_whole(store) >= 2
    assert (
        shard_loader.open_manifest(str(store)).manifest.tokenizer.vocab_size == 360
    )  # the re-run publishes the last spec


TRAINER = """
import json, os, sys
from shard_loader import TokenDataset
url, cache, state_path, log_path = sys.argv[1:5]
ds = TokenDataset(url, seq_len=32, batch_size=4, seed=8, window_shards=2, cache_dir=cache)
if os.path.exists(state_path):
    ds.load_state_dict(json.load(open(state_path)))
with open(log_path, "a") as log:
    for batch in ds:
        log.write(json.dumps(batch["input_ids"][:, :2].tolist()) + "\\n")
        log.flush()
        with open(state_path + ".tmp", "w") as f:
            json.dump(ds.state_dict(), f)
        os.replace(state_path + ".tmp", state_path)
"""


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_killed_loader_resumes_the_stream_exactly_and_reuses_verified_files(tmp_path):
    rng = np.random.default_rng(4)
    m = write_dataset(tmp_path / "pub", {"train": [random_docs(rng, 60, mean_len=300) for _ in range(8)]})
    largest = max(e.nbytes for e in m.splits["train"].shards)
    with FolderServer(tmp_path / "pub", rate=largest) as server:  # about a second per shard: kills land mid-download
        url = f"{server.url}/manifest.json"
        full = subprocess.run(
            [sys.executable, "-c", TRAINER, url, str(tmp_path / "c0"), str(tmp_path / "s0"), str(tmp_path / "l0")],
            cwd=ROOT,
            timeout=HUNG,
        )
        assert full.returncode == 0
        expected = (tmp_path / "l0").read_text().splitlines()
        for more in (
            1,
            300,
            300,
        ):  # killed after this many more batches: first while the next window downloads, then later on
            logged = _lines(tmp_path / "l1") + more
            proc = subprocess.Popen(
                [sys.executable, "-c", TRAINER, url, str(tmp_path / "c1"), str(tmp_path / "s1"), str(tmp_path / "l1")],
                cwd=ROOT,
            )
            while _lines(tmp_path / "l1") < logged and proc.poll() is None:
                time.sleep(0.01)  # polling the trainer's log for the point to kill at
            assert proc.poll() is None, "the trainer ended before the batch it was to be killed after"
            proc.kill()
            proc.wait()
            done = json.loads((tmp_path / "s1").read_text())["batches"] if (tmp_path / "s1").exists() else 0
            lines = (tmp_path / "l1").read_text().splitlines() if (tmp_path / "l1").exists() else []
            (tmp_path / "l1").write_text(
                "".join(line + "\n" for line in lines[:done])
            )  # batches after the last saved state are served again
        gets_before = sum(server.gets.values())
        final = subprocess.run(
            [sys.executable, "-c", TRAINER, url, str(tmp_path / "c1"), str(tmp_path / "s1"), str(tmp_path / "l1")],
            cwd=ROOT,
            timeout=HUNG,
        )
        assert final.returncode == 0
    assert (tmp_path / "l1").read_text().splitlines() == expected
    assert sum(server.gets.values()) - gets_before < 2 * 2 * 8 + 1  # at most every file once more, plus the manifest
    assert not list((tmp_path / "c1").rglob("*.part"))


PACED = """
import json, sys, time
from shard_loader import TokenDataset
from tests.support.positional import samples_of
url, cache, budget, rank, slow, sizes = sys.argv[1:7]
ds = TokenDataset(url, seq_len=16, batch_size=2, seed=3, window_shards=1, rank=int(rank), world_size=2, \
cache_dir=cache, disk_budget=int(budget))
out, said = [], False
for batch in ds:
    out.append(samples_of(batch, json.loads(sizes)))
    if not said and (float(slow) or ds.stats.paced_s):
        print("paced" if not float(slow) else "started", flush=True)
        said = True
    time.sleep(float(slow))
print(json.dumps(out), flush=True)
"""


def test_a_killed_slow_consumer_stops_holding_back_the_ones_sharing_its_cache(tmp_path):
    """The slow rank of a paced cache is SIGKILLed while the fast one waits for it: its place dies with it, so the fast
    rank finishes its exact stream at once, within the budget."""
    from shard_loader import TokenDataset
    from shard_loader.cache.eviction import cache_usage
    from tests.support.positional import samples_of, write_positional

    sizes = [int(n) for n in np.random.default_rng(5).integers(300, 900, size=16)]
    manifest = write_positional(tmp_path / "pub", sizes)
    budget = 3 * max(e.nbytes for e in manifest.splits["train"].shards)
    with FolderServer(tmp_path / "pub") as server:
        run = lambda rank, slow: subprocess.Popen(  # noqa: E731
            [
                sys.executable,
                "-c",
                PACED,
                f"{server.url}/manifest.json",
                str(tmp_path / "cache"),
                str(budget),
                str(rank),
                str(slow),
                json.dumps(sizes),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        slow = run(1, 2 * HUNG)  # one batch, then a "step" longer than any wait below
        assert slow.stdout.readline().strip() == "started"
        fast = run(0, 0.0)
        assert fast.stdout.readline().strip() == "paced"  # held back by the slow rank's place
        slow.kill()
        slow.wait()
        out, _ = fast.communicate(timeout=HUNG)  # far less than the step the slow rank would have held it for
    expected = [
        samples_of(b, sizes)
        for b in TokenDataset(
            str(tmp_path / "pub"), seq_len=16, batch_size=2, seed=3, window_shards=1, rank=0, world_size=2
        )
    ]
    assert fast.returncode == 0 and json.loads(out) == json.loads(json.dumps(expected))
    assert cache_usage(tmp_path / "cache") <= budget
