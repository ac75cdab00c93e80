"""Dedup across the whole dataset: a document is published once, exact copies by default, near copies on request.

The index is a table of rows (key, partition, document) in the store, split by the key's top bits into hash ranges
(as the split proofs split by hash), one object per range: an exact row's key is the hash of its text as published
(its doc_hash, which decides its split, unless a filter rewrote it), a near row's key one of its LSH band keys
(dedup_near.py). A key's kept copy is its row from the partition that joined the index first (new partitions join in
partition-key order), so adding files never removes a published document; a partition that leaves lets the next one
holding a copy keep it (`reclaimed`). An update reads only the joining partitions' hash columns (and texts for near
keys), never the published documents, and holds one range in memory at a time: ranges are the unit of memory and work.

An update writes each partition's decision (what it drops, against which partition), then the ranges it changed
under a new generation, then the members record naming them: a crashed update leaves the last one whole, and a lock
object in the store keeps two updates from racing."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from shard_loader.builder_api import FileRef, load_npy

from .dedup_near import NEAR_KEYS, band_keys, band_layout
from .curate import DEDUP_HASH, curated_input
from .dedup_records import RULES, DedupDecision, DedupMember, DedupMembers
from ..discovery import registered
from ..errors import DedupError
from ..layout import DEDUP_LOCK_KEY, DEDUP_MEMBERS_KEY, dedup_decision_key, dedup_drops_key, dedup_range_key
from ..layout import raw_record_key
from ..records import RawRecord, find_record, get_record, get_records, put_record
from ..spec import DatasetSpec, DedupSpec
from ..store import ObjectMissingError, ObjectStore

ROW = np.dtype([("key", "<u8"), ("member", "<u4"), ("doc", "<u8")])  # one index row: 20 bytes
PAIR = np.dtype([("member", "<u4"), ("doc", "<u8")])
DROP = np.dtype([("member", "<u4"), ("doc", "<u8"), ("rule", "u1"), ("against", "<u4"), ("key", "<u8")])
WRITE_THREADS = 8  # store writes at once: each is a round trip (a PUT on S3, an fsync on a local disk)
LOCK_WAIT = 600.0  # seconds an update waits for another's lock before failing
LOCK_STALE = 900.0  # a lock older than this was left by a killed update and is taken over
READ_BATCH = 1 << 16
NEAR_BATCH = 1 << 12  # documents whose texts near keys read at once: a few tens of MiB of text, not a GiB
SPILL_BUFFER = 64 << 20  # bytes of new rows held before they are appended to their ranges' local files
RANGE_ROWS = 1 << 16  # rows a range holds at most where [dedup] ranges is not set (1.25 MiB): memory flat at any size


def settings_of(dedup: DedupSpec) -> str:
    """The dedup settings an index and its decisions were made with, as one comparable string (with near copies, the
    way their keys are made: keys made another way rebuild the index); the number of ranges decides no copy."""
    fields = {k: v for k, v in asdict(dedup).items() if k != "ranges"} | ({"keys": NEAR_KEYS} if dedup.near else {})
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def kinds_of(dedup: DedupSpec) -> tuple[str, ...]:
    return tuple(k for k, on in zip(RULES, (dedup.exact, dedup.near)) if on)


def range_of(keys: np.ndarray, ranges: int) -> np.ndarray:
    """The hash range of each key: its top log2(ranges) bits."""
    bits = ranges.bit_length() - 1
    if bits == 0:
        return np.zeros(len(keys), dtype=np.int64)
    return (keys >> np.uint64(64 - bits)).astype(np.int64)


# -- the index's ranges --


def range_count(dedup: DedupSpec, kind: str, documents: int, now: int) -> int:
    """The ranges of the index of `kind` over `documents`: [dedup] ranges where set, else the power of two that keeps
    each under RANGE_ROWS rows (never fewer than the `now` it has, so a shrinking dataset does not rewrite it)."""
    if dedup.ranges is not None:
        return dedup.ranges
    rows = documents * (band_layout(dedup.threshold, dedup.num_perm)[0] if kind == "near" else 1)
    return max(now, 1 << max(0, -(-rows // RANGE_ROWS) - 1).bit_length())


def stored_rows(store: ObjectStore, kind: str, generations: tuple[int, ...], index: int, ranges: int) -> np.ndarray:
    """The stored rows of range `index` of `ranges`, from the ranges the index holds (`generations`, as many as it has
    ranges: a range of another count is cut from, or joined of, those)."""
    held = len(generations)
    if held <= ranges:
        r = index * held // ranges if held else 0
        rows = load_range(store, kind, r, generations[r] if held else 0)
        return rows if held == ranges else rows[range_of(rows["key"], ranges) == index]
    per = held // ranges
    return np.concatenate([load_range(store, kind, r, generations[r]) for r in range(index * per, (index + 1) * per)])


def owners(rows: np.ndarray) -> np.ndarray:
    """For rows sorted by (key, member, doc): the index of each row's key's first row, the kept copy."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    starts = np.ones(len(rows), dtype=bool)
    starts[1:] = rows["key"][1:] != rows["key"][:-1]
    return np.maximum.accumulate(np.where(starts, np.arange(len(rows)), 0))


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def load_range(store: ObjectStore, kind: str, index: int, generation: int) -> np.ndarray:
    if generation == 0:
        return np.zeros(0, dtype=ROW)
    data = load_npy(store.get_bytes(dedup_range_key(kind, index, generation)))
    if data.dtype != ROW:
        raise DedupError(f"{dedup_range_key(kind, index, generation)}: rows of {data.dtype}, expected {ROW}")
    return data


class Spill:
    """Rows bucketed in local files (by the hash range of their key, or by the value of column `by`), so a bucket's
    rows are read back without the others'; rows are buffered up to SPILL_BUFFER bytes between writes."""

    def __init__(self, folder: Path, buckets: int, dtype: np.dtype = ROW, by: str | None = None):
        self.folder, self.buckets, self.dtype, self.by = folder, buckets, dtype, by
        self.buffered: dict[int, list[np.ndarray]] = {}
        self.nbytes = 0
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, rows: np.ndarray) -> None:
        where = range_of(rows["key"], self.buckets) if self.by is None else rows[self.by].astype(np.int64)
        order = np.argsort(where, kind="stable")
        bounds = np.searchsorted(where[order], np.arange(self.buckets + 1))
        for r in np.flatnonzero(np.diff(bounds)).tolist():
            self.buffered.setdefault(r, []).append(rows[order[bounds[r] : bounds[r + 1]]])
        self.nbytes += rows.nbytes
        if self.nbytes > SPILL_BUFFER:
            self.flush()

    def flush(self) -> None:
        for r, parts in self.buffered.items():
            with open(self.folder / f"{r}.rows", "ab") as f:
                for part in parts:
                    f.write(part.tobytes())
        self.buffered, self.nbytes = {}, 0

    def rows(self, index: int) -> np.ndarray:
        self.flush()
        path = self.folder / f"{index}.rows"
        return np.fromfile(path, dtype=self.dtype) if path.exists() else np.zeros(0, dtype=self.dtype)


# -- a partition's rows --


def partition_rows(
    store: ObjectStore, raw: RawRecord, member: int, dedup: DedupSpec, folder: Path
) -> Iterator[tuple[str, np.ndarray]]:
    """(kind, rows) of one raw (or curated) partition, a record batch at a time: its documents' hashes (as published:
    dedup_hash where a filter rewrote the text), and with near dedup each document's band keys (from its text)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(store.local_copy(raw.key, folder / "raw.parquet"))
    rekeyed = DEDUP_HASH in pf.schema_arrow.names
    columns = ["doc_hash", "text"][: 1 + dedup.near] + [DEDUP_HASH] * rekeyed
    for batch in pf.iter_batches(batch_size=NEAR_BATCH if dedup.near else READ_BATCH, columns=columns):
        doc_hashes = batch.column("doc_hash")
        docs = doc_hashes.to_numpy().astype(np.uint64)
        if dedup.exact:
            keys = pc.coalesce(batch.column(DEDUP_HASH), doc_hashes).to_numpy() if rekeyed else docs
            yield "exact", rows_of(keys, docs, member)
        if dedup.near:
            keys = band_keys(batch.column("text"), dedup.ngram, dedup.threshold, dedup.num_perm)
            yield "near", rows_of(keys.ravel(), np.repeat(docs, keys.shape[1]), member)


def rows_of(keys: np.ndarray, docs: np.ndarray, member: int) -> np.ndarray:
    rows = np.empty(len(keys), dtype=ROW)
    rows["key"], rows["member"], rows["doc"] = keys, member, docs
    return rows


# -- decisions --


class Dropped:
    """The rows of the target partitions that are not their key's kept copy, (member, doc, rule, against) each,
    spilled to one local file per partition: an update holds one partition's drops at a time, whatever it holds; and
    their exact rows keyed by a rewritten text (`rekeyed`): a drop carries its exact key whichever rule dropped it."""

    def __init__(self, folder: Path, members: int):
        self.spill = Spill(folder, members, DROP, by="member")
        self.rekeyed = Spill(folder / "keys", members, by="member")

    def add(self, rule: int, rows: np.ndarray, lost: np.ndarray, first: np.ndarray) -> None:
        out = np.empty(len(lost), dtype=DROP)
        out["member"], out["doc"], out["rule"] = rows["member"][lost], rows["doc"][lost], rule
        out["against"] = rows["member"][first[lost]]
        self.spill.add(out)

    def of(self, member: int) -> np.ndarray:
        """A partition's dropped documents sorted by hash, one row each (the exact rule's where both dropped it), with
        their exact keys. Flush both spills first when several threads read."""
        rows = self.spill.rows(member)
        rows = rows[np.lexsort((rows["against"], rows["rule"], rows["doc"]))]
        rows, rekeyed = rows[np.unique(rows["doc"], return_index=True)[1]], self.rekeyed.rows(member)
        rows["key"] = rows["doc"]
        hit = np.isin(rekeyed["doc"], rows["doc"])  # rows are sorted by document, one each
        rows["key"][np.searchsorted(rows["doc"], rekeyed["doc"][hit])] = rekeyed["key"][hit]
        return rows


@dataclass(frozen=True)
class Drops:
    """A decision's drop list: the dropped documents' hashes (sorted), their exact keys, partition against, rule."""

    docs: np.ndarray
    keys: np.ndarray
    against: list[str]
    rule: np.ndarray


def read_drops(store: ObjectStore, key: str | None) -> Drops:
    """A decision's drop list at `key` (none: nothing dropped); where it has no `keys`, each document's is its hash."""
    if key is None:
        return Drops(np.zeros(0, np.uint64), np.zeros(0, np.uint64), [], np.zeros(0, np.uint8))
    with zipfile.ZipFile(io.BytesIO(store.get_bytes(key))) as z:  # an .npz: read in threads, so never np.load
        data = {name.removesuffix(".npy"): load_npy(z.read(name)) for name in z.namelist()}
    names = [str(n) for n in data["names"]]
    return Drops(data["docs"], data.get("keys", data["docs"]), [names[i] for i in data["against"]], data["rule"])


def _decision(
    store: ObjectStore,
    partition: str,
    raw: RawRecord,
    settings: str,
    dropped: np.ndarray,
    names: dict[int, str],
    previous: DedupDecision | None,
) -> DedupDecision:
    """A partition's decision from its dropped rows, its drop list put in the store; `reclaimed` counts the documents
    its previous decision (for the same raw build) dropped against a partition and this one keeps."""
    docs, keys, against, rule = dropped["doc"], dropped["key"], dropped["against"], dropped["rule"]
    counts: dict[str, dict[str, int]] = {}
    for r, a in zip(rule.tolist(), against.tolist()):
        per = counts.setdefault(RULES[r], {})
        per[names[a]] = per.get(names[a], 0) + 1
    reclaimed: dict[str, int] = {}
    if previous is not None and previous.raw_sha256 == raw.sha256 and previous.drops is not None:
        old = read_drops(store, previous.drops.key)
        reclaimed = dict(Counter(old.against[i] for i in np.flatnonzero(~np.isin(old.docs, docs)).tolist()))
    ref = None
    if len(docs):
        order = sorted({names[a] for a in against.tolist()})
        index = {n: i for i, n in enumerate(order)}
        rekeyed = {"keys": keys} if (keys != docs).any() else {}  # only where a filter rewrote a text: lists as before
        positions = np.array([index[names[a]] for a in against.tolist()], dtype=np.uint32)
        buf = io.BytesIO()
        np.savez(buf, docs=docs, against=positions, rule=rule, names=np.array(order), allow_pickle=False, **rekeyed)
        data = buf.getvalue()
        sha = hashlib.sha256(data).hexdigest()
        ref = FileRef(key=dedup_drops_key(partition, sha[:16]), size=len(data), sha256=sha)
        store.put_bytes(ref.key, data)
    return DedupDecision(partition, raw.sha256, settings, raw.documents, counts, reclaimed, ref)


# -- the update --


@contextmanager
def index_lock(store: ObjectStore, owner: str, wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold the index's lock object (put only where absent) while updating; a killed update's goes after LOCK_STALE."""
    deadline = time.monotonic() + wait
    while not store.put_bytes(DEDUP_LOCK_KEY, owner.encode(), if_absent=True):
        try:
            if time.time() - store.modified(DEDUP_LOCK_KEY) > LOCK_STALE:
                store.delete(DEDUP_LOCK_KEY)
                continue
        except ObjectMissingError:
            continue
        if time.monotonic() > deadline:
            raise DedupError(
                f"{store.describe()}/{DEDUP_LOCK_KEY}: another dedup update has held the index for over {wait:.0f} s; "
                f"if no build is running, delete that object and rerun"
            )
        time.sleep(0.2)
    try:
        yield
    finally:
        store.delete(DEDUP_LOCK_KEY)


def update_index(
    store: ObjectStore, spec: DatasetSpec, partitions: Sequence[str], run_id: str
) -> dict[str, DedupDecision]:
    """Add `partitions` (raw documents built) to the index, in partition-key order, and take out those that left (no
    longer registered, or rebuilt from a changed file); returns the decisions of `partitions` and of every partition
    this update changed (one holding a copy whose kept copy left): those must be tokenized again."""
    with index_lock(store, run_id), tempfile.TemporaryDirectory(prefix="dedup-") as tmp:
        return _update(store, spec, sorted(partitions), Path(tmp))


def _update(store: ObjectStore, spec: DatasetSpec, partitions: list[str], tmp: Path) -> dict[str, DedupDecision]:
    dedup, settings = spec.dedup, settings_of(spec.dedup)
    old = find_record(store, DEDUP_MEMBERS_KEY, DedupMembers, "dedup") or DedupMembers(settings, 1)
    current = registered(store, spec)
    raws = _raws(store, spec, partitions)
    rebuild = old.settings != settings
    stay = {p: m for p, m in old.members.items() if p in current and (p not in raws or raws[p].sha256 == m.raw_sha256)}
    kept = {} if rebuild else stay  # the members that stay, their rows and ids as they are
    removed = {m.id for p, m in old.members.items() if p not in kept}
    rejoin = [p for _, p in sorted((m.id, p) for p, m in old.members.items() if rebuild and p in current)]
    joining = rejoin + [p for p in partitions if p not in kept and p not in rejoin]
    if not joining and not removed:
        return {p: get_record(store, dedup_decision_key(p), DedupDecision, f"dedup[{p}]") for p in partitions}
    raws |= _raws(store, spec, [p for p in joining if p not in raws])
    members = kept | {p: DedupMember(old.next_id + i, raws[p].sha256, raws[p].documents) for i, p in enumerate(joining)}
    generations = {k: () if rebuild else old.generations.get(k, ()) for k in kinds_of(dedup)}
    documents = sum(m.documents for m in members.values())
    ranges = {k: range_count(dedup, k, documents, len(gens)) for k, gens in generations.items()}
    spill = {kind: Spill(tmp / kind, ranges[kind]) for kind in kinds_of(dedup)}
    for p in joining:
        for kind, rows in partition_rows(store, raws[p], members[p].id, dedup, tmp):
            spill[kind].add(rows)
    next_id = old.next_id + len(joining)
    names = {m.id: p for p, m in members.items()}
    targets = {members[p].id for p in joining}
    if removed and not rebuild:
        targets |= _affected(store, removed, generations)
    update = old.update + 1
    dropped = Dropped(tmp / "dropped", next_id)
    new_generations = {}
    kept_ids = np.array([m.id for m in kept.values()], dtype=np.uint32)
    with ThreadPoolExecutor(WRITE_THREADS) as pool:
        for kind, bucket in spill.items():
            same = len(generations[kind]) == ranges[kind]
            written, pending = list(generations[kind]) if same else [0] * ranges[kind], []
            for r in range(ranges[kind]):
                stored = stored_rows(store, kind, generations[kind], r, ranges[kind])
                keep = np.isin(stored["member"], kept_ids)
                new = bucket.rows(r)
                if same and not len(new) and keep.all():
                    rows = stored
                else:
                    rows = np.concatenate([stored[keep], new])
                    rows = rows[np.lexsort((rows["doc"], rows["member"], rows["key"]))]
                    written[r] = update if len(rows) else 0
                    if len(rows):  # written beside the next range's work, WRITE_THREADS ranges at most in flight
                        pending.append(pool.submit(store.put_bytes, dedup_range_key(kind, r, update), _npy(rows)))
                        if len(pending) >= WRITE_THREADS:
                            pending.pop(0).result()
                _collect(rows, targets, RULES.index(kind), dropped)
            for future in pending:
                future.result()
            new_generations[kind] = tuple(written)
        target_names = [names[m] for m in sorted(targets)]
        raws |= _raws(store, spec, [p for p in target_names if p not in raws])
        found = pool.map(lambda p: find_record(store, dedup_decision_key(p), DedupDecision, "dedup"), target_names)
        previous = dict(zip(target_names, found))
        dropped.spill.flush()
        dropped.rekeyed.flush()

        def decide(p: str) -> DedupDecision:
            d = _decision(store, p, raws[p], settings, dropped.of(members[p].id), names, previous[p])
            put_record(store, dedup_decision_key(p), d)
            return d

        decisions = dict(zip(target_names, pool.map(decide, target_names)))
    put_record(store, DEDUP_MEMBERS_KEY, DedupMembers(settings, next_id, members, new_generations, update))
    _delete_superseded(store, old, new_generations)
    for p in old.members.keys() - members.keys():
        store.delete(dedup_decision_key(p))
    ours = {p: decisions.get(p) or get_record(store, dedup_decision_key(p), DedupDecision, "dedup") for p in partitions}
    return ours | {p: d for p, d in decisions.items() if p not in ours and d != previous[p]}


def _raws(store: ObjectStore, spec: DatasetSpec, partitions: list[str]) -> dict[str, RawRecord]:
    """Each partition's documents as dedup indexes them: its raw record, or its curated one (curate.py)."""
    raws = get_records(store, [raw_record_key(p) for p in partitions], RawRecord, "dedup")
    return {p: curated_input(store, spec, raw)[0] for p, raw in zip(partitions, raws)}


def _collect(rows: np.ndarray, targets: set[int], rule: int, dropped: Dropped) -> None:
    """The rows of target partitions that are not their key's kept copy, added to each one's dropped documents (and
    their exact rows keyed by a rewritten text, to `rekeyed`)."""
    if not len(rows) or not targets:
        return
    first = owners(rows)
    mine = np.isin(rows["member"], np.fromiter(targets, dtype=np.uint32))
    if RULES[rule] == "exact":
        dropped.rekeyed.add(rows[mine & (rows["key"] != rows["doc"])])
    lost = mine & ((rows["member"][first] != rows["member"]) | (rows["doc"][first] != rows["doc"]))
    if lost.any():
        dropped.add(rule, rows, np.flatnonzero(lost), first)


def _affected(store: ObjectStore, removed: set[int], generations: dict[str, tuple[int, ...]]) -> set[int]:
    """The partitions holding a copy of a key whose kept copy was in a partition that left: their decisions change."""
    gone = np.fromiter(removed, dtype=np.uint32)
    affected: set[int] = set()
    for kind, gens in generations.items():
        for r, g in enumerate(gens):
            rows = load_range(store, kind, r, g)
            if not len(rows):
                continue
            hit = np.isin(rows["member"][owners(rows)], gone) & ~np.isin(rows["member"], gone)
            affected |= set(np.unique(rows["member"][hit]).tolist())
    return affected


def _delete_superseded(store: ObjectStore, old: DedupMembers, generations: dict[str, tuple[int, ...]]) -> None:
    """Remove the range objects the committed update replaced."""
    for kind, gens in old.generations.items():
        now = generations.get(kind, ())
        for r, g in enumerate(gens):
            if g and (r >= len(now) or now[r] != g):
                store.delete(dedup_range_key(kind, r, g))
