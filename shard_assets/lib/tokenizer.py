"""The tokenizer: a pretrained one through transformers, a tokenizer.json file used as is, or a byte-level BPE
trained here.

Whatever its origin, it is stored as one `tokenizer.json` whose sha256 is its fingerprint."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shard_loader.builder_api import token_dtype_for

from .errors import StateMismatchError, TokenizerError
from .layout import CURRENT_TOKENIZER_KEY, tokenizer_info_key, tokenizer_key, training_sample_key
from .records import PartitionRecord, RawRecord, TokenizerRecord, TrainingSample, find_record, to_json
from .store import ObjectStore
from .spec import TokenizerSpec
from .user_files import read_user_file

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def fingerprint_of(tokenizer_json: str) -> str:
    """The tokenizer's fingerprint: the sha256 of its file's text, 16 hex digits."""
    return hashlib.sha256(tokenizer_json.encode()).hexdigest()[:16]


TRAIN_PIECE_CHARS = 1 << 16  # the trainer holds every pre-tokenized word of a text at once: feed it bounded pieces


def training_pieces(texts: Iterable[str], max_chars: int, piece_chars: int = TRAIN_PIECE_CHARS) -> Iterator[str]:
    """`texts` cut into pieces of at most `piece_chars`, stopping after `max_chars` in all, so training memory is
    bounded (cuts move a few merge counts at the cut points, never how documents are encoded)."""
    budget = max_chars
    for text in texts:
        for start in range(0, len(text), piece_chars):
            piece = text[start : start + min(piece_chars, budget)]
            yield piece
            budget -= len(piece)
            if budget <= 0:
                return


def train_bpe(texts: Iterable[str], vocab_size: int, eod_token: str) -> Tokenizer:
    """A byte-level BPE trained on `texts`; the end-of-document token gets id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eod_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _is_local_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()


def _load_failure(name: str, exc: Exception) -> str:
    """What is actually wrong when transformers cannot load `name`: offline mode, or the name, or the network."""
    if _is_local_path(name):
        return f"tokenizer path {name} is not a loadable tokenizer folder ({' '.join(str(exc).split())[:200]})"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return (
            f"tokenizer {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            "check the name, download it once without HF_HUB_OFFLINE, or give [tokenizer].name as a local folder"
        )
    return (
        f"cannot load tokenizer {name!r} from the Hugging Face Hub: check the name and the network "
        f"({' '.join(str(exc).split())[:200]})"
    )


def load_pretrained(name: str, eod_token: str) -> tuple[Tokenizer, int]:
    """A tokenizer by Hub id or local path, via transformers; returns (tokenizers.Tokenizer, eod id)."""
    if _is_local_path(name) and not Path(name).expanduser().exists():
        raise TokenizerError(f"tokenizer path {name} does not exist")
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(Path(name).expanduser()) if _is_local_path(name) else name)
    except (OSError, ValueError) as exc:
        raise TokenizerError(_load_failure(name, exc)) from None
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerError(f"tokenizer {name!r} has no fast (tokenizers) backend; only fast tokenizers are supported")
    eod = backend.token_to_id(eod_token)
    eod = hf.eos_token_id if eod is None else eod
    if eod is None:
        raise TokenizerError(
            f"tokenizer {name!r} has neither the token {eod_token!r} nor an eos token; set [tokenizer].eod_token"
        )
    return backend, int(eod)


def read_tokenizer_file(path: str, eod_token: str) -> tuple[str, Tokenizer, int]:
    """A `tokenizer.json` used as is: (its exact text, tokenizers.Tokenizer, eod id). Every failure is one line
    naming `[tokenizer].path` and the file."""
    where = f"[tokenizer].path {path}"
    missing = "no such file; give the path of a tokenizer.json (relative to the spec's folder)"
    text = read_user_file(Path(path), where, "a tokenizer.json", missing, TokenizerError)
    try:
        tok = load_tokenizer(text)
    except Exception as exc:  # tokenizers raises a bare Exception on any malformed file
        raise TokenizerError(f"{where}: not a tokenizers tokenizer.json ({' '.join(str(exc).split())[:200]})") from None
    eod = tok.token_to_id(eod_token)
    if eod is None:
        raise TokenizerError(
            f"{where}: has no token {eod_token!r}; set [tokenizer].eod_token to its end-of-document token"
        )
    return text, tok, eod


def eod_problem(tok: Tokenizer, eod_id: int) -> str | None:
    """Why `eod_id` cannot be this tokenizer's end-of-document id, or None: it must be a special added token, the only
    kind no document text ever encodes to (texts are encoded with special tokens as text)."""
    special = {i: t.content for i, t in tok.get_added_tokens_decoder().items() if t.special}
    if eod_id in special:
        return None
    named = tok.id_to_token(eod_id)
    listed = ", ".join(f"{t!r} = {i}" for i, t in sorted(special.items())[:5]) or "none"
    what = f"{named!r}, not a special token" if named is not None else "no token at all"
    return f"id {eod_id} is {what} (its special tokens: {listed})"


def check_tokenizer_record(tokenizer_json: str, record: TokenizerRecord, where: str) -> None:
    """`record` (read at `where`) describes the tokenizer file it names: the file's fingerprint, its vocabulary size
    and dtype, and an end-of-document id that is one of its special tokens; else one line (StateMismatchError)."""
    file_key = tokenizer_key(record.fingerprint)
    redo = "the record was edited or written by another build: materialise the tokenizer asset again to rewrite it"
    if (found := fingerprint_of(tokenizer_json)) != record.fingerprint:
        raise StateMismatchError(
            f"{where}: names tokenizer {record.fingerprint}, but {file_key} has fingerprint {found}; {redo}"
        )
    tok = load_tokenizer(tokenizer_json)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if record.vocab_size != vocab or record.token_dtype != token_dtype_for(vocab):
        raise StateMismatchError(
            f"{where}: says vocab_size {record.vocab_size} ({record.token_dtype}), but {file_key} has {vocab} ids "
            f"({token_dtype_for(vocab)}); {redo}"
        )
    if (problem := eod_problem(tok, record.eod_id)) is not None:
        raise StateMismatchError(f"{where}: says eod_id {record.eod_id}, but in {file_key} {problem}; {redo}")


def build_tokenizer(spec: TokenizerSpec, texts: Iterator[str]) -> tuple[str, TokenizerRecord]:
    """The tokenizer's JSON and its record: from a pretrained name, a file used byte for byte (so its fingerprint is
    the hash of the file), or by training on `texts`."""
    if spec.kind == "file":
        assert spec.path is not None  # the spec's parser requires `path` for kind = "file", `name` for "pretrained"
        text, tok, eod = read_tokenizer_file(spec.path, spec.eod_token)
        name = spec.name or Path(spec.path).name
    elif spec.kind == "pretrained":
        assert spec.name is not None
        tok, eod = load_pretrained(spec.name, spec.eod_token)
        name, text = spec.name, tok.to_str()
    else:
        tok = train_bpe(training_pieces(texts, spec.train_max_bytes), spec.vocab_size, spec.eod_token)
        trained_eod = tok.token_to_id(spec.eod_token)
        assert trained_eod is not None  # train_bpe makes it the first special token
        eod, name, text = trained_eod, f"bpe-{spec.vocab_size}", tok.to_str()
    if (problem := eod_problem(tok, eod)) is not None:
        raise TokenizerError(
            f"[tokenizer].eod_token {spec.eod_token!r}: {problem}; name a special token, which no document text "
            "encodes to"
        )
    vocab = tok.get_vocab_size(with_added_tokens=True)
    record = TokenizerRecord(name, fingerprint_of(text), vocab, eod, token_dtype_for(vocab))
    return text, record


def load_tokenizer(tokenizer_json: str) -> Tokenizer:
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer_json)


@dataclass
class TrainingReads:
    """The raw partitions a BPE's training began to read, in order, and whether it read to the end of the last."""

    started: list[RawRecord] = field(default_factory=list)
    finished: bool = False

    def sample(self, registered: dict[str, PartitionRecord]) -> TrainingSample:
        return TrainingSample(
            tuple(_entry(r.partition, registered[r.partition]) for r in self.started if r.partition in registered),
            budget_reached=not self.finished,
        )


def _entry(partition: str, record: PartitionRecord) -> str:
    return f"{partition}@{record.fingerprint}"


def training_texts(store: ObjectStore, raws: list[RawRecord], reads: TrainingReads | None = None) -> Iterator[str]:
    """Raw documents of the given partitions in order, read lazily: `build_tokenizer` stops reading once it has
    `train_max_bytes` (see training_pieces); `reads` records how far it went."""
    import pyarrow.parquet as pq

    for raw in raws:
        if reads is not None:
            reads.started.append(raw)
        with store.open_read(raw.key) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=1000, columns=["text"]):
                yield from batch.column(0).to_pylist()
    if reads is not None:
        reads.finished = True


def store_training_sample(store: ObjectStore, fingerprint: str, sample: TrainingSample) -> None:
    store.put_if_changed(training_sample_key(fingerprint), to_json(sample))


def tokenizer_forecast(store: ObjectStore, spec: TokenizerSpec, registered: dict[str, PartitionRecord]) -> str | None:
    """One line when making the tokenizer now would replace the current one (so every token id would change), and how
    to keep it; None when it would not, or cannot be told without loading it (a pretrained name) or training."""
    current = current_record(store)
    if current is None:
        return None
    keep = f'to keep {current.fingerprint}, set [tokenizer] fingerprint = "{current.fingerprint}"'
    if spec.fingerprint:
        why = None if spec.fingerprint == current.fingerprint else f"[tokenizer] fingerprint pins {spec.fingerprint}"
    elif spec.kind == "file":
        assert spec.path is not None
        try:
            text = Path(spec.path).expanduser().read_bytes().decode("utf-8")
            why = None if fingerprint_of(text) == current.fingerprint else f"[tokenizer].path {spec.path} differs"
        except (OSError, UnicodeDecodeError):
            return None  # the build itself names what is wrong with the file
    elif spec.kind == "train_bpe":
        sample = find_record(store, training_sample_key(current.fingerprint), TrainingSample, "tokenizer forecast")
        if sample is None:
            return None  # trained by a release that did not record its sample
        entries = [_entry(k, r) for k, r in registered.items()]
        now = entries[: len(sample.partitions)] if sample.budget_reached else entries
        changed, gone = len(set(now) - set(sample.partitions)), len(set(sample.partitions) - set(now))
        since = f"{changed} partitions new or changed, {gone} gone since it was trained"
        why = f"the BPE would be trained again ({since})" if changed or gone else None
    else:
        return None
    if why is None:
        return None
    return (
        f"this build replaces the tokenizer {current.fingerprint}: {why}; every token id changes and every partition "
        f'is re-tokenized; {keep} (or name a tokenizer file: kind = "file")'
    )


def store_tokenizer(store: ObjectStore, tokenizer_json: str, record: TokenizerRecord) -> None:
    """Write the tokenizer's file and record under its fingerprint, then make it the store's current tokenizer;
    what the store holds already is not written again (a rebuild with read-only keys writes nothing here)."""
    store.put_if_changed(tokenizer_key(record.fingerprint), tokenizer_json.encode())
    store.put_if_changed(tokenizer_info_key(record.fingerprint), to_json(record))
    store.put_if_changed(CURRENT_TOKENIZER_KEY, to_json(record))  # the pointer last: it names only files in the store


def pinned_tokenizer(store: ObjectStore, fingerprint: str) -> tuple[str, TokenizerRecord]:
    """The JSON and record of the tokenizer `[tokenizer].fingerprint` pins, from the store (never trained again)."""
    where = f"[tokenizer].fingerprint {fingerprint}"
    record = find_record(store, tokenizer_info_key(fingerprint), TokenizerRecord, where)
    if record is None:
        current = current_record(store)
        raise TokenizerError(
            f"{where}: no tokenizer with this fingerprint in {store.describe()} (tokenizers/{fingerprint}/); pin one "
            f"it holds{f' (the current one is {current.fingerprint})' if current else ''}, or remove the line"
        )
    text = store.get_bytes(tokenizer_key(fingerprint)).decode("utf-8")
    if fingerprint_of(text) != fingerprint or record.fingerprint != fingerprint:
        raise TokenizerError(f"{where}: {tokenizer_key(fingerprint)} in {store.describe()} does not hash to it")
    return text, record


def current_record(store: ObjectStore) -> TokenizerRecord | None:
    """The store's current tokenizer record, None before the first tokenizer (unchecked: for notices only)."""
    return find_record(store, CURRENT_TOKENIZER_KEY, TokenizerRecord, "current tokenizer")


def tokenizer_change(
    store: ObjectStore, previous: TokenizerRecord | None, record: TokenizerRecord | None
) -> str | None:
    """One line when `record` replaces `previous` as the current tokenizer: every token id changes (every partition
    is re-tokenized; a model trained on the old ids cannot read the new), and how to keep the old one."""
    if previous is None or record is None or previous.fingerprint == record.fingerprint:
        return None
    return (
        f"the tokenizer changed from {previous.fingerprint} to {record.fingerprint}: every token id changes and every "
        f"partition is re-tokenized; to keep {previous.fingerprint} (it stays in {store.describe()}), set "
        f'[tokenizer] fingerprint = "{previous.fingerprint}" and build again'
    )
