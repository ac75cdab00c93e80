"""What a manifest's tokenizer fields must agree with in its tokenizer file (the `tokenizers` library's JSON, read as
plain JSON so the loader stays light): a vocab_size above every id the file holds (it may pad them, as models pad
their embeddings, never fall below), and an end-of-document id that is a special token."""

from __future__ import annotations

import json

from .manifest import TokenizerInfo


def tokenizer_file_problem(data: bytes, info: TokenizerInfo) -> str | None:
    """Why the manifest's `info` does not describe the tokenizer file `data`, or None."""
    key = info.file.key
    try:
        doc = json.loads(data)
        vocab, added = doc["model"]["vocab"], doc.get("added_tokens") or []
        ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab)))  # Unigram: [piece, score]s
        ids |= {int(t["id"]) for t in added}
        special = {int(t["id"]): str(t["content"]) for t in added if t.get("special")}
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{key}: not a tokenizer file (the `tokenizers` JSON, with model.vocab and added_tokens)"
    if max(ids, default=-1) >= info.vocab_size:
        return f"{key} holds token id {max(ids):,}, not below the manifest's tokenizer.vocab_size {info.vocab_size:,}"
    if info.eod_id not in special:
        listed = ", ".join(f"{t!r} = {i}" for i, t in sorted(special.items())[:5]) or "none"
        return (
            f"the manifest's tokenizer.eod_id {info.eod_id} is not a special token of {key} (its special tokens: "
            f"{listed})"
        )
    return None
