"""PyTorch integration: an IterableDataset that serves the rank's stream under TokenDataLoader (fast, grouped) or
under any other DataLoader, torchdata's StatefulDataLoader included (one batch per item), resumable under both.

The dataset is built once, in the trainer's process (where the rank and world size are resolved), and sent to every
worker whatever the start method. A pass over it starts at the anchor, a position kept in a small shared tensor that
the trainer's process writes (set_epoch, load_state_dict, and TokenDataLoader at each iteration); every worker plans
the rest of the epoch from the anchor, and batch k counted from it goes to worker (k // group) % num_workers, which is
the order in which a DataLoader asks its workers, so the delivered stream is the rank's stream for any worker count.

Under TokenDataLoader, workers hand over groups of `batches_per_transfer` batches: they write a group into a slot of
shared memory made by TokenDataLoader and send only the slot number; the main process hands the trainer views of the
slot, without a copy or per-sample work, and counts the batches served, so it knows where the stream stands. A slot's
group is marked held from its arrival until no tensor refers to it any more; a worker never writes a held slot (it
sends that group as a fresh tensor instead), and each worker owns prefetch_factor + 2 slots, more than it can have in
flight, so a batch the trainer keeps is never overwritten.

Under another DataLoader, only the workers know how far a pass has gone: each reports its own place (`WorkerState`)
from `state_dict()`, which is what a StatefulDataLoader snapshots per worker and gives back to the same worker on
restore. The trainer's process refuses what it cannot know (its own state_dict() while workers serve, a second pass
over the same anchor), and a pass whose dataset was moved or restored by a newer loop is refused at its next batch.
"""

from __future__ import annotations

import gc
import multiprocessing
import secrets
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from .errors import MissingExtraError

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info
except ModuleNotFoundError as exc:
    raise MissingExtraError(exc.name or "torch", "torch", "shard_loader.torch_dataset") from None
if TYPE_CHECKING:
    from torch.utils.data._utils.worker import WorkerInfo
    from torch.utils.data.dataloader import _BaseDataLoaderIter

from .arguments import ArgumentError, integer
from .dataset import TokenDataset
from .errors import ShardLoaderError
from .format import Shard
from .format.codec import from_dict, to_plain
from .state import StateError
from .trainers import Follower
from .world import Consumer, resolve_world

_MOVES, _SERVED_BY, _ANCHOR = 0, 1, 2  # fields of the shared tensor: the anchor's ints start at _ANCHOR
_MAX_WORKERS = 1024  # slots of the shared table of which pass each worker serves


@dataclass(frozen=True)
class WorkerPlace:
    """Which worker of how many, and the next batch (counted from the pass's anchor) it serves."""

    worker: int
    num_workers: int
    next_batch: int


@dataclass(frozen=True)
class WorkerState:
    """One DataLoader worker's place in a pass: the pass's anchor (a loader state) and the worker's place. A
    StatefulDataLoader snapshots it and restores the same worker."""

    anchor: dict[str, Any]
    place: WorkerPlace

    KEY = "shard_loader_worker"

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: to_plain(self.place), "anchor": self.anchor}

    @classmethod
    def from_dict(cls, state: Any) -> WorkerState | None:
        """The worker state in `state`, or None when it is not one."""
        if not isinstance(state, dict) or cls.KEY not in state:
            return None
        if "anchor" not in state:
            raise StateError(f"state_dict {cls.KEY!r} has no 'anchor' beside it")
        return cls(state["anchor"], from_dict(WorkerPlace, state[cls.KEY], f"state_dict.{cls.KEY}", StateError))


@dataclass
class _Pass:
    """A pass this process serves outside TokenDataLoader: its anchor, the worker it serves as, and its next batch."""

    id: int
    anchor: Any
    # the anchor as a loader state, built once: StatefulDataLoader asks for it after every batch
    anchor_state: dict[str, Any]
    worker: int
    num_workers: int
    start: int  # the first batch (counted from the anchor) this process serves in the pass
    next_batch: int
    moves: int  # the dataset's move count when the pass began: a later move supersedes the pass
    loader: int  # the loader iteration whose workers serve the pass (from the seed all its workers share), else 0
    refusal: ShardLoaderError | None = None  # why the pass may not serve: raised at its first batch (see _batches)

    @property
    def served(self) -> bool:
        return self.next_batch != self.start


Batch = dict[str, torch.Tensor]  # "input_ids", "labels", "component"[, "position_ids"]


class Group(TypedDict, total=False):
    """What a worker sends TokenDataLoader for a group of batches: the slot and rows it filled, or fresh tensors."""

    slot: int
    rows: int
    tokens: torch.Tensor
    component: torch.Tensor
    position_ids: torch.Tensor


class TorchTokenDataset(IterableDataset[Batch | Group]):
    """Batches of int64 tensors {"input_ids", "labels", "component"[, "position_ids"]} under any DataLoader (pass
    batch_size=None), torchdata's StatefulDataLoader included; under TokenDataLoader, groups of batches in shared slots
    (faster). A mixture's URL serves the mixture (a MixtureStream)."""

    def __init__(self, url: str, batches_per_transfer: int = 16, **options: Any):
        super().__init__()
        self.group = integer("batches_per_transfer", batches_per_transfer, 1)
        self.data = TokenDataset(url, **options)
        self.batch_size, self.label_shift = self.data.batch_size, self.data.spec.label_shift
        # moves, which loader iteration's workers served batches since the anchor (0: none), then the anchor: where the
        # current pass started, as the dataset encodes a position in ints
        width = len(self.data.encode_position(self.data.position))
        self._shared: torch.Tensor = torch.zeros(_ANCHOR + width, dtype=torch.int64).share_memory_()
        self._store(self.data.position)  # zeros are no mixture's position: a spawned worker plans from this anchor
        # the pass each worker id serves
        self._owners: torch.Tensor = torch.zeros(_MAX_WORKERS, dtype=torch.int64).share_memory_()
        self.grouped = False  # set by TokenDataLoader: serve groups into its slots
        self.slots: list[torch.Tensor] = []  # workers * slots_per_worker tensors (rows, span), set by TokenDataLoader
        self.slot_components: list[torch.Tensor] = []  # each slot's rows' components: a view of the slot's storage
        self.held: np.ndarray | None = None  # 1 while the trainer may still hold a view of the slot
        self.slots_per_worker = 0
        self._pass: _Pass | None = None  # the pass this process serves outside TokenDataLoader
        self._restored: WorkerState | None = None  # a worker's place a StatefulDataLoader gave back, for its next pass
        self.follower = Follower()  # trainers.py: how accelerate reads this dataset, learnt when it calls
        self._loaded = False  # a state was loaded in the trainer's process: a late world carries it whole

    def make_ring(self, workers: int, prefetch_factor: int) -> None:
        """Shared slots for `workers` workers that keep at most `prefetch_factor` groups in flight each."""
        self.slots_per_worker = prefetch_factor + 2
        rows, span = self.group * self.batch_size, self.data.spec.span
        flat: list[torch.Tensor] = [
            torch.empty(rows * (span + 1), dtype=torch.int64).share_memory_()
            for _ in range(workers * self.slots_per_worker)
        ]
        self.slots = [f[: rows * span].view(rows, span) for f in flat]  # tokens, then components, in one storage:
        self.slot_components = [f[rows * span :] for f in flat]  # a batch's views keep the whole slot held
        self.held = torch.zeros(len(self.slots), dtype=torch.uint8).share_memory_().numpy()

    @property
    def rank(self) -> int:
        return self.data.rank

    @property
    def world_size(self) -> int:
        return self.data.world_size

    def anchor(self) -> Any:
        """Where the current pass started: fixed while workers run, so every worker plans from the same point."""
        return self.data.decode_position(self._shared[_ANCHOR:].tolist())

    @property
    def moves(self) -> int:
        """How often the stream was moved from outside a loop (set_epoch, load_state_dict): a running loop compares
        it."""
        return int(self._shared[_MOVES])

    def watch_moves(self) -> Callable[[], bool]:
        """A test of whether the stream was moved since this call, cheap enough for every batch (0.4 us, against 5 us
        for reading the shared tensor through torch)."""
        shared = self._shared.numpy()
        start = shared[_MOVES]
        return lambda: shared[_MOVES] != start

    def position(self) -> Any:
        """Where the trainer's stream stands: the anchor advanced by the batches served since."""
        anchor = self.anchor()
        return self.data.advanced(self.data.plan(anchor), anchor, self._served)

    def settle_world(self) -> None:
        """A dataset built as rank 0 of 1 because nothing said more, in a process that now has a process group
        (Lightning's `python train.py` builds it in process 0, then starts the others), takes the process group's rank
        and world size, continuing its stream in the version it opened (called in the trainer's process). It carries
        a loaded state, or a position within an epoch, whole; else only the epoch, so its stream is the one the other
        ranks open at this world size (a mixture's blocks and epoch lengths are of the world size its stream starts
        at)."""
        world = self.data.world
        if not world.assumed or get_worker_info() is not None or (now := resolve_world()) == world:
            return
        self.data.position = position = self.position()
        state, o = self.data.state_dict(), self.data.options
        options = {f.name: getattr(o, f.name) for f in fields(o) if f.init}
        self.data.close()
        self.data = TokenDataset(self.data.version_url, **{**options, "rank": now.rank, "world_size": now.world_size})
        if self._loaded or position.batches:
            self.data.load_state_dict(state)
        else:
            self.data.set_epoch(position.epoch)
        self._store(self.data.position)

    def rebase(self) -> None:
        """Anchor the next iteration where the trainer's stream stands (called before workers start or resume); a
        finished epoch stands at the next one's start, so a loop started again without set_epoch serves the next
        epoch, as a DistributedSampler's does."""
        self.settle_world()
        self.data.position = self.position()
        self.data.onward()
        self._store(self.data.position)

    def _store(self, position: Any, moved: bool = False) -> None:
        self._shared[_ANCHOR:] = torch.tensor(self.data.encode_position(position))
        self._shared[_SERVED_BY] = 0
        if moved:
            self._shared[_MOVES] += 1
        self._served = 0  # batches handed to the trainer since the anchor (main process only)

    def batches(self) -> int:
        """Batches (not groups) this rank serves in the current epoch."""
        self.settle_world()
        anchor = self.anchor()
        return int(anchor.batches + self.data.plan(anchor).total_batches)

    def __len__(self) -> int:
        """This rank's batches; where accelerate's loaders may read it, what they read: rows, of every process
        (trainers.py)."""
        processes = self.follower.processes(self)
        return self.batches() if processes is None else self.batches() * self.batch_size * processes

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for a spawned DataLoader worker: the trainer's process first settles its world and records how
        accelerate reads it."""
        self.settle_world()
        self.follower.follow(self)
        return self.__dict__

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch`; a no-op when the stream is already in it, so a restored position survives."""
        self.settle_world()
        if self.follower.follow(self) is None:  # trainers.py: accelerate's loaders call this before each pass too
            self.follower.placed = True
        self.data.position = self.anchor() if self._shared[_SERVED_BY] else self.position()
        self.data.set_epoch(epoch)
        if self.data.position.epoch != self.anchor().epoch:
            self._store(self.data.position, moved=True)

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands. In a DataLoader worker (a StatefulDataLoader asks there), that worker's place."""
        info = get_worker_info()
        if info is not None:
            self.follower.check_worker_state(self)  # trainers.py
            return self._worker_state(info)
        if self._shared[_SERVED_BY] and not self.grouped:
            raise StateError(
                "TorchTokenDataset.state_dict() cannot know how far DataLoader workers have served: save the "
                "StatefulDataLoader's state_dict() (or iterate with TokenDataLoader, whose state_dict() knows)"
            )
        self.data.position = self.position()
        return self.data.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state: this dataset's or TokenDataLoader's, or a whole StatefulDataLoader state
        (then at any num_workers and world size). In a worker, a StatefulDataLoader gives back that worker's place."""
        info = get_worker_info()
        if info is not None:  # raised here, not at the first batch: torchdata asserts the worker count right after
            self._restored = self._check_worker_state(state, info)
            return
        if WorkerState.from_dict(state) is not None:
            raise StateError(
                "state_dict is one DataLoader worker's place: load the StatefulDataLoader's whole state_dict()"
            )
        if isinstance(state, dict) and not _LOADER_KEYS.isdisjoint(state):
            self._load_loader_state(state)
        else:
            self.data.load_state_dict(state)
        self.data.placed = self.follower.placed = self._loaded = True
        self._store(self.data.position, moved=True)

    def advance(self) -> None:
        """Count one batch as served to the trainer (called by TokenDataLoader in the main process)."""
        self._served += 1

    def __iter__(self) -> Iterator[Batch | Group]:
        own = self._groups() if self.grouped else self._batches(self._begin_pass())
        return self.follower.route(self, own)  # trainers.py: or what accelerate's reading needs

    def _groups(self) -> Generator[Group, None, None]:
        """Groups of batches for TokenDataLoader, in its shared slots when it has workers."""
        info = get_worker_info()
        ds = self.data
        plan = ds.plan(self.anchor())
        consumer = Consumer(info.id, info.num_workers, self.group) if info is not None else Consumer(group=self.group)
        rows, total = self.group * ds.batch_size, plan.total_batches
        slots = [s.numpy() for s in self.slots] if info is not None else []
        slot_components = [c.numpy() for c in self.slot_components] if info is not None else []
        buf: np.ndarray | None = None
        comps: np.ndarray | None = None
        slot: int | None = None
        pos: list[np.ndarray] = []
        filled, sent = 0, 0
        for k, shards, shard_ids, starts in ds.serve(plan, consumer):
            if buf is None or comps is None:  # both or neither
                slot = info.id * self.slots_per_worker + sent % self.slots_per_worker if slots and info else None
                if slot is not None and self.held is not None and self.held[slot]:  # the trainer holds a batch of it
                    slot = None
                buf = slots[slot] if slot is not None else np.empty((rows, ds.spec.span), dtype=np.int64)
                comps = slot_components[slot] if slot is not None else np.empty(rows, dtype=np.int64)
            ds.fill(buf[filled : filled + len(starts)], shards, shard_ids, starts)
            comps[filled : filled + len(starts)] = ds.components_of(shard_ids)
            if ds.position_ids:
                pos.append(ds.positions(shards, shard_ids, starts))
            filled += len(starts)
            del shards  # a released window must not stay mapped here while the next one is awaited
            end = k + len(starts) // ds.batch_size  # runs end at group boundaries, or where the plan ends
            if end % self.group == 0 or end == total:
                yield self._pack(buf, comps, filled, pos, slot)
                buf, comps, pos, filled, sent = None, None, [], 0, sent + 1

    def _begin_pass(self) -> _Pass:
        """Start a pass outside TokenDataLoader, at once (a StatefulDataLoader asks the worker's state before the first
        batch)."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        refusal: ShardLoaderError | None = (
            ArgumentError(f"num_workers {workers} is above the {_MAX_WORKERS} TorchTokenDataset supports")
            if workers > _MAX_WORKERS
            else None
        )
        restored, self._restored = self._restored, None
        loader = (info.seed - info.id) % (1 << 62) + 1 if info is not None else 0  # one value per loader iteration
        if restored is not None:  # a StatefulDataLoader gave this worker its place back
            self.data.load_state_dict(restored.anchor)
            anchor, first = self.data.position, restored.place.next_batch
        elif info is None:  # in the trainer's process: continue where the stream stands
            self.rebase()
            anchor, first = self.anchor(), 0
        else:
            served_by, before = int(self._shared[_SERVED_BY]), self._pass
            if (served_by and served_by != loader) or (
                before is not None and before.moves == self.moves and before.served
            ):
                refusal = refusal or StateError(
                    "this DataLoader's workers already served batches from this position and cannot know where the "
                    "last loop stopped: call dataset.set_epoch(epoch) before each loop (with Lightning: in "
                    "on_train_epoch_start), restore a StatefulDataLoader state, or use TokenDataLoader (which "
                    "continues where a loop stopped)"
                )
            anchor, first = self.anchor(), worker
        self.data.position = anchor
        state, moves = self.data.state_dict(), self.moves
        p = _Pass(secrets.randbits(62) + 1, anchor, state, worker, workers, first, first, moves, loader, refusal)
        if refusal is None:
            self._owners[worker] = p.id
        self._pass = p
        return p

    def _batches(self, p: _Pass) -> Generator[Batch, None, None]:
        """One batch per item: batches p.next_batch, + num_workers, ... of the rank's stream from the pass's anchor."""
        if p.refusal is not None:  # raised at the first batch, not in __iter__: a persistent worker whose iter() raises
            # dies (torch re-creates the iterator outside its try, and torchdata 0.11 then fails on a deleted name)
            raise p.refusal
        ds = self.data
        origin = ds.plan(p.anchor)
        first = min(p.next_batch, origin.total_batches)
        plan = ds.plan(ds.advanced(origin, p.anchor, first))  # the rest of the pass, from this worker's next batch
        shared, owners = self._shared.numpy(), self._owners.numpy()
        in_trainer = p.loader == 0
        for k, shards, shard_ids, starts in ds.serve(plan, Consumer(0, p.num_workers)):
            if shared[_MOVES] != p.moves or owners[p.worker] != p.id:
                raise StateError(
                    "this loop's dataset was loaded, moved to another epoch or served by a newer loop while the loop "
                    "was running: break out of the loop after load_state_dict() or set_epoch(), then iterate again"
                )
            batch = self.batch(shards, shard_ids, starts)
            del shards  # a released window must not stay mapped here while the next one is awaited
            p.next_batch = first + k + p.num_workers
            if in_trainer:
                self._served += 1
            else:
                shared[_SERVED_BY] = p.loader
            yield batch

    def batch(self, shards: dict[int, Shard], shard_ids: np.ndarray, starts: np.ndarray) -> Batch:
        """The batch of these rows: input_ids and labels are views of one tensor (a worker sends each storage through a
        new shared memory segment)."""
        ds, m = self.data, self.label_shift
        tokens = torch.empty((len(starts), ds.spec.span), dtype=torch.int64)
        ds.fill(tokens.numpy(), shards, shard_ids, starts)
        batch = {"input_ids": tokens[:, :-m], "labels": tokens[:, m:]}
        batch["component"] = torch.from_numpy(ds.components_of(shard_ids))
        if ds.position_ids:
            batch["position_ids"] = torch.from_numpy(ds.positions(shards, shard_ids, starts))
        return batch

    def _worker_state(self, info: WorkerInfo) -> dict[str, Any]:
        p = self._pass
        if p is None:
            raise StateError("state_dict() in a DataLoader worker before its pass began")
        return WorkerState(p.anchor_state, WorkerPlace(p.worker, p.num_workers, p.next_batch)).to_dict()

    def _check_worker_state(self, state: dict[str, Any], info: WorkerInfo) -> WorkerState:
        """A worker's place given back by a StatefulDataLoader, if this worker can honour it exactly."""
        saved = WorkerState.from_dict(state)
        if saved is None:
            raise StateError(
                "a DataLoader worker was given a state that is not a worker's place: load it into the dataset in the "
                "trainer's process"
            )
        world, anchor = self.data.world_size, self.data.parse_state(saved.anchor)
        saved_world, place = anchor.world_size, saved.place
        if (place.num_workers, saved_world) != (info.num_workers, world) or place.worker != info.id:
            raise StateError(
                f"this StatefulDataLoader state was saved with num_workers={place.num_workers} and "
                f"world_size={saved_world}; this loader has num_workers={info.num_workers} and world_size={world}, "
                "and a StatefulDataLoader restores each worker only from its own saved place: call "
                "dataset.load_state_dict(state) instead (exact at any num_workers and world size) and iterate a "
                "StatefulDataLoader that loaded nothing"
            )
        anchor.check(self.data.stream_key())
        return saved

    def _load_loader_state(self, state: dict[str, Any]) -> None:
        """Load the position a whole StatefulDataLoader state describes (see `_LOADER_KEYS`): its workers' anchor,
        advanced by the batches the loader served since, for a dataset and a mixture alike."""
        if "_snapshot" not in state:  # no workers: the loader kept the dataset's own state
            dataset_state = state.get("dataset_state")
            if not isinstance(dataset_state, dict):
                raise StateError(
                    "StatefulDataLoader state_dict has no dataset_state: was it saved over a TorchTokenDataset?"
                )
            return self.data.load_state_dict(dataset_state)
        try:
            snapshot = state["_snapshot"]
            at, since = int(snapshot["_snapshot_step"]), int(state["_steps_since_snapshot"])
            places = [WorkerState.from_dict(w["dataset_state"]) for w in snapshot["_worker_snapshots"].values()]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise StateError(f"StatefulDataLoader state_dict is malformed ({e!r})") from None
        workers = [w for w in places if w is not None]
        if not workers or len(workers) != len(places) or len({repr(w.anchor) for w in workers}) != 1:
            raise StateError("StatefulDataLoader state_dict does not hold one TorchTokenDataset pass in every worker")
        saved_world = self.data.parse_state(workers[0].anchor).world_size
        self.data.load_state_dict(workers[0].anchor)
        anchor = self.data.position
        # batches are counted in the saved world size's plan: the position they reach is the same for every rank
        plan = replace(self.data.plan(anchor), rank=0, world_size=saved_world)
        total, nexts = plan.total_batches, [w.place.next_batch for w in workers]
        if min(at, total) != min(min(nexts), total):  # the workers' places are those of the snapshot
            raise StateError(
                f"StatefulDataLoader state_dict is inconsistent: snapshot at step {at}, its workers' next batches "
                f"{nexts}"
            )
        self.data.position = self.data.advanced(plan, anchor, min(at + since, total))

    @staticmethod
    def _pack(buf: np.ndarray, comps: np.ndarray, filled: int, pos: list[np.ndarray], slot: int | None) -> Group:
        group: Group
        if slot is not None:
            group = {"slot": slot, "rows": filled}
        else:
            group = {"tokens": torch.from_numpy(buf[:filled]), "component": torch.from_numpy(comps[:filled])}
        if pos:
            group["position_ids"] = torch.from_numpy(np.concatenate(pos))
        return group


_LOADER_KEYS = frozenset({"_snapshot", "_num_yielded"})  # a StatefulDataLoader's state_dict (with / without workers)


# references to a storage, views included; absent: copy slots
_USE_COUNT: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def _uses(tensor: torch.Tensor) -> int:
    if _USE_COUNT is None:
        raise ShardLoaderError("slots are held by reference count, and this torch has no torch._C._storage_Use_Count")
    return _USE_COUNT(tensor.untyped_storage()._cdata)


class TokenDataLoader(DataLoader[Batch | Group]):
    """A DataLoader over a TorchTokenDataset: unpacks each transfer into batches of int64 tensors
    {"input_ids", "labels", "component"[, "position_ids"]}, and counts those handed to the trainer."""

    dataset: TorchTokenDataset

    def __init__(self, dataset: TorchTokenDataset, **options: Any):
        super().__init__(dataset, batch_size=None, **options)
        dataset.grouped = True
        if self.num_workers > 0 and self.prefetch_factor is not None:  # torch sets it (default 2) with workers
            dataset.make_ring(self.num_workers, self.prefetch_factor)
        self._unused = [_uses(slot) for slot in dataset.slots] if _USE_COUNT else []  # a slot's count with no view

    def _free_slots(self, held: np.ndarray) -> None:
        """Let workers write again into slots of which the trainer holds no view any more."""
        for s in np.flatnonzero(held).tolist():
            if _uses(self.dataset.slots[s]) <= self._unused[s]:
                held[s] = 0

    def __len__(self) -> int:
        return self.dataset.batches()

    def _get_iterator(self) -> _BaseDataLoaderIter:
        """Forked workers start with the parent's objects frozen out of the cyclic collector: a collection in a worker
        would otherwise write into the header of every object it inherited and copy each page (at 30,000 shards that
        was most of a worker's unique memory). The parent unfreezes at once; its own garbage is collected as before."""
        context = self.multiprocessing_context or multiprocessing.get_context()
        if self.num_workers == 0 or context.get_start_method() != "fork":
            return super()._get_iterator()
        gc.freeze()
        try:
            return super()._get_iterator()
        finally:
            gc.unfreeze()

    def __iter__(self) -> Iterator[Batch]:  # type: ignore[override]  # torch annotates DataLoader.__iter__ as its own iterator class, not Iterator
        """The rest of the rank's stream. A set_epoch() or load_state_dict() inside the loop applies at its next batch:
        the workers' pass is dropped and a new one starts where the stream was moved to."""
        while (yield from self._one_pass()):
            pass

    def _one_pass(self) -> Generator[Batch, None, bool]:
        """One pass of the workers from where the stream stands; returns True when the stream was moved during it."""
        ds = self.dataset
        b, m, pin = ds.batch_size, ds.label_shift, self.pin_memory and torch.cuda.is_available()
        ds.rebase()
        moved = ds.watch_moves()
        held = ds.held
        if held is not None:
            self._free_slots(held)
        group: Group
        for group in super().__iter__():
            if "slot" in group:
                if held is None:
                    raise ShardLoaderError(
                        "a DataLoader worker filled a shared slot, but this TokenDataLoader made none"
                    )
                self._free_slots(held)
                slot, rows = group["slot"], group["rows"]
                tokens, component = ds.slots[slot][:rows], ds.slot_components[slot][:rows]
                if _USE_COUNT:
                    held[group["slot"]] = 1
                else:
                    tokens, component = tokens.clone(), component.clone()
            else:
                tokens, component = group["tokens"], group["component"]
            if pin:
                tokens, component = tokens.pin_memory(), component.pin_memory()
            split = tokens.view(-1, b, tokens.shape[1])
            inputs, labels = split[:, :, :-m].unbind(0), split[:, :, m:].unbind(0)
            components = component.view(-1, b).unbind(0)
            positions = (
                group["position_ids"].view(-1, b, group["position_ids"].shape[1]).unbind(0)
                if "position_ids" in group
                else None
            )
            del tokens, split, component
            for k in range(len(inputs)):
                batch = {"input_ids": inputs[k], "labels": labels[k], "component": components[k]}
                if positions is not None:
                    batch["position_ids"] = positions[k]
                ds.advance()
                yield batch
                if moved():
                    return True
            del inputs, labels, components, positions, batch
        return False

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)
