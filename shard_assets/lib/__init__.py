"""The builder's plain library: spec, sources, text normalisation, raw writing, tokenizers and encoding,
typed records, keys, the store, state, planning and publishing. It never imports Dagster, so every
stage is testable without an instance; shard_assets/defs/ wires it into assets."""
