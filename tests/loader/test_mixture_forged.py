"""A mixture file is checked, not trusted (#34 cases 5 and 6): its `tokenizer` record against its components' manifests
(a forged vocab_size or eod_id is refused naming the field and both values, by the loader and by `shard-loader info`),
its component count against a stated bound (refused in one line before any component is opened), and its
`tokens_per_epoch` against a bound that keeps epoch arithmetic in 64 bits (refused by the loader and by the builder's
audits)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from shard_loader.mixture.interleave import Interleave

from shard_assets.lib.mixture.audits import audit_mixture
from shard_loader import ManifestError, TokenDataset
from shard_loader.format import parse_mixture
from shard_loader.format.mixture import MAX_COMPONENTS, MAX_TOKENS_PER_EPOCH
from tests.support.mixture_files import VOCAB, Part, write_components, write_mixture
from tests.support.patience import HUNG

pytestmark = pytest.mark.integration

PARTS = [Part("web", (300,) * 2, 0.6, 0), Part("code", (200,) * 3, 0.3, 1), Part("math", (120,), 0.1, 2)]
OPTS = dict(seq_len=16, batch_size=2)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_components(tmp_path_factory.mktemp("store"), PARTS)


def _info(url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shard_loader.cli", "info", url], capture_output=True, text=True, timeout=HUNG
    )


def _refused_in_one_line(out: subprocess.CompletedProcess, pattern: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert re.search(pattern, line), line


@pytest.mark.parametrize(
    "field, forged, truth", [("vocab_size", 10, VOCAB), ("eod_id", 5, 0), ("fingerprint", "forged", "synthetic")]
)
def test_a_forged_tokenizer_record_is_refused_naming_the_field_and_both_values(store, field, forged, truth):
    url = write_mixture(store, f"forged-{field}", PARTS, 4_000, edit=lambda d: d["tokenizer"].update({field: forged}))
    said = rf"component 'web' .*: tokenizer {field} {truth!r} is not the mixture's {forged!r}"
    with pytest.raises(ManifestError, match=said):
        TokenDataset(url, **OPTS)
    assert not list(store.glob("*/readers/*/*.json"))  # the components opened before the refusal gave theirs back
    _refused_in_one_line(_info(url), said)


def _many(count: int):
    """An edit giving the mixture `count` components (the three parts, repeated under new names), weights summing
    to 1."""

    def edit(doc):
        parts = doc["components"]
        doc["components"] = [dict(parts[i % len(parts)], name=f"c{i}", weight=1 / count) for i in range(count)]

    return edit


def test_more_components_than_the_bound_are_refused_in_one_line_before_any_is_opened(store, monkeypatch):
    url = write_mixture(store, "crowd", PARTS, 4_000, edit=_many(MAX_COMPONENTS + 1))
    said = rf"components: {MAX_COMPONENTS + 1:,} components, more than the {MAX_COMPONENTS:,} a mixture may have"
    opened = []
    for module in ("shard_loader.mixture.opening", "shard_loader.stream"):
        monkeypatch.setattr(f"{module}.open_manifest", lambda *a, **k: opened.append(a))
    with pytest.raises(ManifestError, match=said):
        TokenDataset(url, **OPTS)
    assert opened == []  # refused before any component's manifest was read
    _refused_in_one_line(_info(url), said)
    at_bound = json.loads(open(write_mixture(store, "full", PARTS, 4_000, edit=_many(MAX_COMPONENTS))).read())
    assert len(parse_mixture(json.dumps(at_bound)).components) == MAX_COMPONENTS


@pytest.mark.parametrize("tokens", [MAX_TOKENS_PER_EPOCH + 1, 2**63 - 1])
def test_tokens_per_epoch_past_the_bound_is_refused_by_the_loader_and_the_audits(store, tokens):
    url = write_mixture(store, f"huge-{tokens}", PARTS, tokens)
    said = rf"tokens_per_epoch\.train: {tokens:,} is more than {MAX_TOKENS_PER_EPOCH:,}"
    with pytest.raises(ManifestError, match=said):
        TokenDataset(url, **OPTS)
    mixture = parse_mixture(open(url).read(), url)
    audits = {a.name: a for a in audit_mixture(mixture, str(store))}
    assert not audits["tokens_per_epoch_bounded"].passed
    assert any(f"{tokens:,}" in p for p in audits["tokens_per_epoch_bounded"].problems)
    fine = parse_mixture(open(write_mixture(store, "fine", PARTS, MAX_TOKENS_PER_EPOCH)).read(), "fine")
    assert {a.name: a.passed for a in audit_mixture(fine, str(store))}["tokens_per_epoch_bounded"]


def test_skipping_to_an_epoch_of_a_mixture_at_the_bound_costs_a_few_pd2_steps_not_a_walk(store, monkeypatch):
    """set_epoch(3) on a mixture of 2**48 tokens per epoch used to walk every block of three epochs (it never
    returned); each epoch now starts its interleave from exact quotas, one PD2 step per epoch before it."""
    url = write_mixture(store, "vast", PARTS, MAX_TOKENS_PER_EPOCH)
    steps = []
    real = Interleave.picks

    def counted(self, state):
        steps.append(state.start)
        if len(steps) > 100:
            raise AssertionError(f"{len(steps)} PD2 steps to reach an epoch: a walk through its samples")
        return real(self, state)

    monkeypatch.setattr(Interleave, "picks", counted)
    with TokenDataset(url, **OPTS) as ds, TokenDataset(url, **OPTS) as again:  # their leases go with them
        ds.set_epoch(3)
        batch = next(iter(ds))
        length = MAX_TOKENS_PER_EPOCH // OPTS["seq_len"]
        assert ds.state_dict()["epoch_start"] == 3 * length and batch["component"].shape == (OPTS["batch_size"],)
        again.load_state_dict(ds.state_dict())
        assert next(iter(again))["input_ids"].tolist() == next(iter(ds))["input_ids"].tolist()
    assert len(steps) <= 100


def test_a_mixture_at_the_bound_holds_one_reader_lease_per_dataset_version_not_per_component(store):
    """Opening a file at the bound stays cheap: its 1,024 components over 3 dataset versions share 3 renewed leases (a
    lease, a renewal thread and two store lookups per component made the opening cost 24 s here)."""
    import threading

    url = write_mixture(store, "at-bound", PARTS, 4_000, edit=_many(MAX_COMPONENTS))
    before = set(threading.enumerate())  # by identity: a reader another test left open renews a lease of the same name
    ds = TokenDataset(url, **OPTS)
    leases = sorted(p.relative_to(store).as_posix() for p in store.glob("*/readers/*/*.json"))
    assert [key.split("/")[0] for key in leases] == ["code", "math", "web"], leases
    renewing = [t for t in threading.enumerate() if t.name.startswith("lease-") and t not in before]
    assert len(renewing) == 3
    ds.close()
    assert not list(store.glob("*/readers/*/*.json"))  # the last share out removes each lease
