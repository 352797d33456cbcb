"""TRLHooks: how one algorithm's run differs in the TRL engine's shared steps (model, datasets, callbacks, final
save). A builder that needs a difference registers `hooks=` a subclass (`builders.py`: PPOHooks); the engine asks
its builder's hooks, never the algorithm's name. Light to import: callbacks (transformers) are imported on use."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import JobConfig
    from training_platform.training.rollouts import RolloutWriter


class TRLHooks:
    """How one algorithm's run differs in the TRL engine's shared steps; the defaults are the common way."""

    def prepare_dataset(self, dataset: Any, tokenizer: Any, cfg: JobConfig) -> Any:
        """The train / eval dataset as the trainer takes it."""
        return dataset

    def loss_from(self, cfg: JobConfig) -> Callable[[dict], float | None] | None:
        """The logged loss computed from other logged values, when the trainer logs none."""
        return None

    def rollout_callback(self, cfg: JobConfig, rollouts: RolloutWriter, tokenizer: Any) -> Any:
        """RL: the callback that keeps a sample of each logging step's rollouts (rollouts.jsonl)."""
        from training_platform.training.engines.trl.callbacks import RolloutCallback

        return RolloutCallback(rollouts)

    def final_model(self, trainer: Any) -> Any:
        """The model saved to final/."""
        return trainer.model
