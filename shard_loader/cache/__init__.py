"""The local cache a remote dataset's files pass through: verified downloads, leases that keep a file while it is
read, eviction under a disk budget, and windows of shards rotated through it."""
