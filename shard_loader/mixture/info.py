"""What `shard-loader info` says about a mixture: per split, each component's weight against its natural share, its
tokens, and the epochs of it one mixture epoch implies (a component that repeats says so), from its verified
manifest."""

from __future__ import annotations

import json
from dataclasses import asdict

from .opening import OpenedMixture, open_components


def describe(opened: OpenedMixture, as_json: bool = False) -> str:
    """The lines `shard-loader info` prints for a mixture (component manifests read and verified, no shard table)."""
    mix = opened.file
    manifests = [m.manifest for m in open_components(opened, splits=[])]
    tok = mix.tokenizer
    lines = [
        f"mixture     {mix.name}  version {mix.version}  created {mix.created_at}  ({len(mix.components)} components)",
        f"tokenizer   {tok.fingerprint}, vocab {tok.vocab_size:,}, eod {tok.eod_id}, {tok.token_dtype}",
    ]
    report = {}
    for split, per_epoch in mix.tokens_per_epoch.items():
        rows = mix.summary(split, [m.splits[split].tokens if split in m.splits else 0 for m in manifests])
        report[split] = [asdict(r) for r in rows]
        lines.append(f"{split:<11} {per_epoch:>15,} tokens per mixture epoch")
        lines.append(
            f"  {'component':<16} {'weight':>7} {'natural':>8} {'tokens':>15} {'epochs/mixture epoch':>21}  version"
        )
        for r in rows:
            note = f"  repeats: {r.epochs:.2f} of its epochs per mixture epoch" if r.epochs > 1 else ""
            cap = f", max_repeats {r.max_repeats:g}" if r.max_repeats is not None else ""
            lines.append(
                f"  {r.name:<16} {r.weight:>7.3f} {r.natural:>8.3f} {r.tokens:>15,} {r.epochs:>21.3f}  "
                f"{r.version}{cap}{note}"
            )
    if as_json:
        doc = {"mixture": mix.name, "version": mix.version, "splits": report, "lineage": mix.lineage}
        lines.append(json.dumps(doc, indent=2))
    return "\n".join(lines)
