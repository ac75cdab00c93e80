"""One cache for all components of a remote mixture: their windows share cache_dir and disk_budget (each component
its own folder and a part of the budget in proportion to the room it needs); a budget that cannot hold two windows of
every component is refused naming the minimum, and with all components rotating the cache never exceeds the budget."""

import pytest

from shard_loader import DiskBudgetError, TokenDataset
from shard_loader.cache.eviction import cache_usage  # the files on disk, measured as the cache measures them
from tests.support.http_server import FolderServer
from tests.support.mixture_files import Part, samples_of, write_components, write_mixture

pytestmark = pytest.mark.integration

PARTS = [Part("web", (3000,) * 8, 0.6, 0), Part("code", (2000,) * 12, 0.3, 1), Part("math", (240,), 0.1, 2)]
SIZES = {p.index: p.sizes for p in PARTS}
OPTS = dict(seq_len=16, batch_size=2, seed=3, window_shards=2)


def test_components_share_one_budget_and_it_holds_while_all_rotate(tmp_path):
    store = write_components(tmp_path / "store", PARTS)
    url = write_mixture(store, "blend", PARTS, tokens_per_epoch=16_000)
    local = [samples_of(b, SIZES) for epoch in (0, 1) for b in _epoch(TokenDataset(url, **OPTS), epoch)]
    with FolderServer(store) as server:
        remote = f"{server.url}/mixtures/blend.json"
        with pytest.raises(
            DiskBudgetError,
            match=(
                r"the minimum is 82,355 bytes \(two largest windows and a download journal each: "
                r"web 48,613, code 32,613, math 1,129\)"
            ),
        ):
            TokenDataset(remote, cache_dir=tmp_path / "cache", disk_budget=60_000, **OPTS)
        budget = 90_000
        ds = TokenDataset(remote, cache_dir=tmp_path / "cache", disk_budget=budget, **OPTS)
        assert sum(c.disk_budget for c in ds.components) <= budget
        served, peak = [], 0
        for epoch in (0, 1):
            for batch in _epoch(ds, epoch):
                served.append(samples_of(batch, SIZES))
                peak = max(peak, cache_usage(tmp_path / "cache"))
        assert served == local  # the same stream as from the local store
        assert 0 < peak <= budget
        assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").iterdir()) == ["code", "math", "web"]
        assert all(s.max_cache_bytes <= c.disk_budget for s, c in zip(ds.stats.values(), ds.components))
        by_default = TokenDataset(remote, cache_dir=tmp_path / "default", disk_budget=budget, seq_len=16, batch_size=2)
        assert next(iter(by_default))["component"].shape == (2,)  # windows sized from the budget's part per component


def _epoch(ds, epoch):
    ds.set_epoch(epoch)
    return ds
