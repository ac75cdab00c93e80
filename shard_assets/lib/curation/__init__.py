"""Per-document decisions, one room: which documents of a raw partition are published (dedup today; quality filters
and decontamination join it), each a plain function over Arrow columns with its own lineage record."""
