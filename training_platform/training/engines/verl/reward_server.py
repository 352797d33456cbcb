"""PPO's learned reward model under verl, served by the platform itself: a Ray actor that loads the model with the
inference workers' own code (`evaluation/classifier.py`: `load_classifier` and `pool`, the `/pooling` route's scorer)
and answers the `/pooling` request shape, so the reward module (rewards.py) scores every rollout through a real
served model on any device. verl's own reward-model path serves it with vLLM or SGLang on GPUs; this one runs
wherever the job runs (CPU included) and on every node of a Ray cluster (the actor is found by name).

Request and response (as `POST /api/v1/openai/v1/pooling`, docs/engines.md):

    {"input": ["<prompt as the policy's chat template renders it><completion>", ...]}
    -> {"object": "list", "model": "<path>", "data": [{"index": i, "object": "pooling", "data": [score]}],
        "usage": {"prompt_tokens": N, "total_tokens": N, "completion_tokens": 0}}

The driver (rl.py) starts it before verl's TaskRunner, named in its namespace `training_platform` by a name of the
run's own (`TP_VERL_REWARD_MODEL_ACTOR` in every verl process), and it dies with the driver.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "training_platform"
ACTOR_ENV = "TP_VERL_REWARD_MODEL_ACTOR"  # the served model's actor name, in every verl process's environment
MAX_INPUTS = 64  # the /pooling route's bound


class RewardModelServer:
    def __init__(self, path: str, device: str = "auto"):
        import torch

        from training_platform.evaluation.classifier import load_classifier

        torch.set_num_threads(1)  # beside the actor workers on the node: one core's worth
        self.path = path
        self.classifier = load_classifier(path, device=device)

    def pool(self, request: dict[str, Any]) -> dict[str, Any]:
        from training_platform.evaluation.classifier import pool

        texts = request["input"]
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not 1 <= len(texts) <= MAX_INPUTS:
            raise ValueError(f"input: 1..{MAX_INPUTS} texts, got {len(texts)}")
        result = pool(self.classifier, texts)
        tokens = sum(result.prompt_tokens)
        return {
            "object": "list",
            "model": self.path,
            "data": [{"index": i, "object": "pooling", "data": d} for i, d in enumerate(result.data)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }


def actor_name() -> str:
    """A name of its own for each run (a shared cluster serves many runs' reward models at once)."""
    import uuid

    return f"tp_reward_model_{uuid.uuid4().hex[:12]}"


def start(path: str, *, device: str, name: str) -> Any:
    """The served reward model (a named actor owned by this driver: it dies with it), loaded: errors loading it are
    raised here."""
    import ray

    server: Any = (
        ray.remote(RewardModelServer)
        .options(name=name, namespace=NAMESPACE, num_cpus=0, max_concurrency=4)
        .remote(path, "cuda" if device == "cuda" else "cpu")
    )
    ray.get(server.pool.remote({"input": ["ready"]}))
    return server


def score(texts: list[str]) -> list[float]:
    """The served model's score of each text (called in verl's reward workers, in the same Ray job)."""
    import os

    import ray

    name = os.environ.get(ACTOR_ENV)
    if not name:
        raise RuntimeError(f"{ACTOR_ENV} is not set: the driver serves the reward model and names it there")
    served: Any = ray.get_actor(name, namespace=NAMESPACE)
    response: dict[str, Any] = ray.get(served.pool.remote({"input": texts}))
    return [float(item["data"][0]) for item in response["data"]]
