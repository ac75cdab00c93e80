"""Per-document decisions, one room: which documents of a raw partition are published. The curation stage
(curate.py: quality filters, then decontamination against the eval sets) writes what survives; dedup, last, indexes
that and leaves out copies. Each a plain function over Arrow columns with its own lineage record."""
