"""Mixtures: published datasets blended by weight. A spec (TOML) names pinned or live component manifests; the
builder resolves and pins them, writes `mixtures/<name>/<version>.json` once, audits exactly that version and
only then replaces `mixtures/<name>.json`, the file trainers read."""
