"""What every room of the platform uses and that depends on none of them: settings (the one reader of the
environment), paths under the data directory, the path policy (who may read which path) and its config types,
files (sha256, atomic writes, JSON/JSONL), time (aware UTC), process helpers."""
