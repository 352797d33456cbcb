"""Algorithm registry. Adding an algorithm = one module here + one line below + one example YAML."""

from __future__ import annotations

from training_platform.training.algorithms import dpo, grpo, kto, orpo, ppo, reinforce_pp, reward, rloo, sft, simpo
from training_platform.training.algorithms.base import AlgorithmSpec

ALGORITHMS: dict[str, AlgorithmSpec] = {
    spec.name: spec
    for spec in (
        sft.ALGORITHM,
        dpo.ALGORITHM,
        kto.ALGORITHM,
        orpo.ALGORITHM,
        simpo.ALGORITHM,
        grpo.ALGORITHM,
        rloo.ALGORITHM,
        ppo.ALGORITHM,
        reinforce_pp.ALGORITHM,
        reward.ALGORITHM,
    )
}
