"""engine: verl's checks beyond the shared layers, for the API's validate, the preflight and the dry run
(training/engine_registry.py ENGINE_CHECKS). Light to import: verl itself is imported only inside the hooks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.core.errors import FieldError
from training_platform.training.engine_registry import EngineChecks
from training_platform.training.engines.verl.checks import rollout_problems, runtime_problems

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import JobConfig

# Our lr_scheduler names verl has a schedule for (mapping.LR_SCHEDULER); others run constant.
LR_SCHEDULERS = ("constant", "constant_with_warmup", "cosine")


class VerlChecks(EngineChecks):
    """engine: verl's checks beyond the shared layers (training/engine_registry.py ENGINE_CHECKS)."""

    def warnings(self, cfg: JobConfig) -> list[str]:
        t, out = cfg.training, []
        if t.lr_scheduler not in LR_SCHEDULERS:
            out.append(
                f"training.lr_scheduler {t.lr_scheduler!r}: verl has constant (with warm-up) and cosine schedules "
                "only; it runs constant"
            )
        if cfg.algorithm.name != "sft" and cfg.resources.max_restarts:
            out.append(
                f"resources.max_restarts {cfg.resources.max_restarts}: verl's RL is not restarted after a worker or "
                "node dies (the run fails naming it); continue it with tp train --resume once the cluster has the "
                "nodes again"
            )
        if cfg.algorithm.name != "sft" and cfg.verl.rollout in ("vllm", "sglang"):
            out.append(
                f"verl.rollout {cfg.verl.rollout} needs a GPU: the worker's preflight checks its devices when the "
                "job starts (auto or hf run anywhere)"
            )
        return out

    def config_problems(self, cfg: JobConfig) -> list[FieldError]:
        """The verl config generated from the job, with our checks and verl's validate_config (as the dry run)."""
        from training_platform.training.config import ConfigError

        try:
            from training_platform.training.engines.verl import engine

            problems = rollout_problems(cfg)  # vllm / sglang asked for where this host cannot run them
            if problems:
                return problems
            engine.verl_config(cfg, engine.planned_paths(cfg, None))
        except ConfigError as exc:
            return exc.errors
        except ImportError as exc:  # verl not installed where the API runs
            return [FieldError("engine", f"verl is not installed here ({exc}); install the [verl] extra")]
        return []

    def preflight_problems(self, cfg: JobConfig, rows: dict[str, Any], *, dry_run: bool) -> list[FieldError]:
        """The rows suit verl's datasets; the generated verl config passes our checks and verl's; a real start
        also needs what verl's RL runs on."""
        from training_platform.training.config import ConfigError
        from training_platform.training.engines.verl import engine

        for field in ("data.train_file", "data.eval_file"):
            loaded = rows.get(field, ([],))[0]
            if not loaded:
                continue
            row = loaded[0]  # a file's rows share one canonical shape
            if cfg.algorithm.name == "sft" and "messages" not in row and not {"prompt", "completion"} <= set(row):
                return [
                    FieldError(
                        field,
                        "engine verl trains SFT on conversations (messages) or prompt/completion rows, not plain text",
                    )
                ]
            if cfg.algorithm.name != "sft" and "answer" not in row:
                return [
                    FieldError(
                        field,
                        "verl's RL rows need a reference answer (an `answer` column: verl's reward_model.ground_truth)",
                    )
                ]
        problems = rollout_problems(cfg)
        if problems:
            return problems
        try:
            engine.verl_config(cfg, engine.planned_paths(cfg, None))
        except ConfigError as exc:
            return exc.errors
        if dry_run:
            return []
        if cfg.algorithm.name == "sft":
            return []
        nodes = _cluster_nodes(cfg)
        if isinstance(nodes, FieldError):
            return [nodes]
        return runtime_problems(cfg, gpus=_gpus(cfg, nodes), nodes=nodes)

    def plan(self, cfg: JobConfig, output: Path | None) -> str:
        from training_platform.training.engines.verl import engine, generate

        config = engine.verl_config(cfg, engine.planned_paths(cfg, output))
        return "\n# verl_config.yaml (generated for verl " + generate.verl_version() + ")\n" + generate.to_yaml(config)


def _cluster_nodes(cfg: JobConfig) -> list[dict] | FieldError | None:
    """The alive nodes of the Ray cluster a `launcher: ray` job joins (None: no cluster to read)."""
    from training_platform.core.settings import current_settings

    address = current_settings().ray_address
    if cfg.resources.resolved_launcher != "ray" or not address or address.startswith("ray://"):
        return None
    from training_platform.training import ray_cluster

    snap = ray_cluster.snapshot(address)
    if "error" in snap:
        return FieldError("resources.launcher", f"the Ray cluster (TP_RAY_ADDRESS) cannot be reached: {snap['error']}")
    return [n for n in snap["nodes"] if n["state"] != "DEAD"]


def _gpus(cfg: JobConfig, nodes: list[dict] | None) -> float:
    """GPUs verl's RL would have: the Ray cluster's (launcher ray) or this machine's."""
    if nodes is not None:
        return float(sum(n["resources"].get("GPU", {}).get("total", 0.0) for n in nodes))
    import torch

    return float(torch.cuda.device_count()) if torch.cuda.is_available() else 0.0
