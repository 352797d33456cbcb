"""training_platform: self-hosted LLM post-training (training core, data factory, evaluation, API)."""

__version__ = "0.1.0"
