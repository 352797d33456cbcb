"""Our registered reward functions as verl's `custom_reward_function`, so a reward behaves the same under both
engines. The run directory gets a generated `verl/reward_fn.py` that names the job's rewards (name, weight,
params); verl imports it on its reward workers and calls

    compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> {"score": ..., ...}

which calls each reward function as TRL would (one completion, the dataset's columns: the reference answer as
`answer` and under each reward's `answer_field`, the rest from extra_info) and returns the weighted sum (weights
normalised to 1, as with TRL) plus each function's value under `rewards/<name>`, which verl logs per step.
An `llm_judge` reward adds judge/<name>/cache_hit, billable and error (0/1 for this sample: their means are the
step's rates); its cache and anti-simulation monitor live in each of verl's reward workers (a trip raises there and
fails the run); the cumulative counters and latency percentiles of TRL runs are not available under verl.

An agent episode (`agent:`, engines/verl/agent/loop.py) hands its record over in extra_info: the reward functions
then score `agent_final_answer` (the last assistant message without its tool-call blocks), never the decoded
response, which holds the tools' outputs too (a tool result with the right number must not earn the reward); the
score adds the episode's per-call rewards (`tool_call_reward` / `tool_error_reward`, as the loop recorded them on
its tool turns), reported as `rewards/tool_calls`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def make_compute_score(rewards: list[dict[str, Any]], *, reward_model: bool = False) -> Callable[..., dict[str, float]]:
    """`reward_model`: PPO's learned reward model (reward_server.py) scores the rendered prompt (`rm_prompt` in
    extra_info) plus the completion; its score is added to the weighted reward functions', as `rewards/reward_model`."""
    from training_platform.training.rewards import build_reward_function

    functions = [
        (
            r["name"],
            float(r.get("weight", 1.0)),
            build_reward_function(r["name"], r.get("params") or {}),
            (r.get("params") or {}).get("answer_field"),
        )
        for r in rewards
    ]
    total = sum(weight for _, weight, _, _ in functions) or 1.0

    def compute_score(
        data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
    ) -> dict[str, float]:
        columns = {k: v for k, v in (extra_info or {}).items() if isinstance(k, str)}
        agent = isinstance(columns.get("agent_final_answer"), str)
        if agent:
            solution_str = columns["agent_final_answer"]
        columns.setdefault("answer", ground_truth)
        columns.setdefault("data_source", data_source)
        out: dict[str, float] = {}
        score = 0.0
        for name, weight, function, answer_field in functions:
            row = dict(columns)
            if answer_field:
                row.setdefault(answer_field, ground_truth)
            value = function(
                prompts=[row.get("prompt")],
                completions=[solution_str],
                **{k: [v] for k, v in row.items() if k != "prompt"},
            )[0]
            value = 0.0 if value is None else float(value)  # verl needs a number; TRL skips None in its mean
            out[f"rewards/{name}"] = value
            judge: Any = getattr(function, "_fn", None)  # the wrapped reward (llm_judge's JudgeReward: last_calls)
            if getattr(judge, "last_calls", None):  # llm_judge: what this sample's call was (verl logs the means)
                call = judge.last_calls[0]
                prefix = f"judge/{judge.name}/"
                out[prefix + "cache_hit"] = float(call.cached)
                out[prefix + "billable"] = float(not call.cached)
                out[prefix + "error"] = float(call.score is None)
            score += weight / total * value
        if reward_model:
            from training_platform.training.engines.verl.reward_server import score as served_score

            value = served_score([f"{columns.get('rm_prompt') or ''}{solution_str}"])[0]
            out["rewards/reward_model"] = value
            score += value
        if agent:
            tool_reward = tool_call_rewards(columns)
            out["rewards/tool_calls"] = tool_reward
            score += tool_reward
        out["score"] = score
        return out

    return compute_score


def tool_call_rewards(extra_info: dict[str, Any]) -> float:
    """The sum of an agent episode's per-call rewards: the loop's tool turns (`agent_turns`), else verl's own
    `tool_rewards` list (the same values, as our loop returned them)."""
    turns = extra_info.get("agent_turns")
    if isinstance(turns, list | tuple):
        values = [t.get("reward") for t in turns if isinstance(t, dict) and t.get("role") == "tool"]
    else:
        raw = extra_info.get("tool_rewards")
        values = list(raw) if isinstance(raw, list | tuple) else []
    return float(sum(float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)))


def write_reward_module(path: Path, rewards: list[dict[str, Any]], *, reward_model: bool = False) -> None:
    """The `verl/reward_fn.py` verl imports (its path is in the generated config)."""
    spec = json.dumps(rewards, indent=2, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '"""Generated by training_platform: this run\'s reward functions, called by verl (custom_reward_function)."""\n'
        "import json\n\n"
        "from training_platform.training.engines.verl.rewards import make_compute_score\n\n"
        f"REWARDS = json.loads({spec!r})\n"
        f"compute_score = make_compute_score(REWARDS, reward_model={reward_model!r})\n"
    )
