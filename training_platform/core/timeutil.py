"""Time as the platform records it: timezone-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def now_iso() -> str:
    """Now in UTC, ISO 8601 to the second (run.json, reports, manifests)."""
    return utcnow().isoformat(timespec="seconds")
