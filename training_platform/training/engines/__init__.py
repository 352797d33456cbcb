"""Engine registry: `engine: trl` in the job config picks the class here."""

from __future__ import annotations

from training_platform.training.engines.base import Engine, EngineResult


def get_engine(name: str) -> Engine:
    if name == "trl":
        from training_platform.training.engines.trl_engine import TRLEngine

        return TRLEngine()
    raise ValueError(f"unknown engine {name!r}")


__all__ = ["Engine", "EngineResult", "get_engine"]
