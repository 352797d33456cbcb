"""The verl engine: where a job's verl files live in its run directory and the verl config it runs.

Run directory (beside what every engine writes):
    verl_config.yaml        the generated verl config (mapping.py), as composed and checked
    verl/train.parquet      data.train_file converted to verl's schema (val.parquet for the eval data)
    verl/reward_fn.py       RL: the custom_reward_function verl calls (the job's reward functions and weights)
    verl/tools.yaml         RL with `agent`: the tools verl's agent loop calls (agent/tools.py)
    verl/checkpoints/       verl's global_step_N, registered as checkpoints/step_NNNNNN
    verl/rollouts/          RL: verl's per-step rollout dumps (<step>.jsonl), sampled into rollouts.jsonl, then removed
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

from training_platform.training.algorithms import ppo
from training_platform.training.engines.verl import mapping
from training_platform.training.engines.verl.mapping import VerlPaths

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig
    from torch import Tensor

    from training_platform.training.config import JobConfig

PLACEHOLDER_RUN_DIR = "<run_dir>"
log = logging.getLogger("training_platform.train")


def planned_paths(cfg: JobConfig, run_dir: Path | None) -> VerlPaths:
    """The files the verl config points at, under `run_dir` (a placeholder when there is none yet: dry run)."""
    from training_platform.core.paths import resolve_model_ref

    base = f"{run_dir if run_dir is not None else PLACEHOLDER_RUN_DIR}/verl"
    algorithm = cfg.algorithm
    critic = reward_model = None
    if isinstance(algorithm, ppo.Params):
        critic = resolve_model_ref(algorithm.value_model_path)[0] if algorithm.value_model_path else None
        reward_model = resolve_model_ref(algorithm.reward_model_path)[0] if algorithm.reward_model_path else None
    return VerlPaths(
        model=resolve_model_ref(cfg.model.path)[0],
        train_files=f"{base}/train.parquet",
        val_files=f"{base}/val.parquet" if cfg.has_eval() else None,
        local_dir=f"{base}/checkpoints",
        reward_module=f"{base}/reward_fn.py" if algorithm.name != "sft" and (cfg.rewards or reward_model) else None,
        rollout_dir=f"{base}/rollouts" if algorithm.name != "sft" else None,
        critic_model=critic,
        reward_model=reward_model,
        tools_config=f"{base}/tools.yaml" if algorithm.name != "sft" and cfg.agent is not None else None,
    )


def verl_config(cfg: JobConfig, paths: VerlPaths) -> DictConfig:
    from training_platform.training.engines import require_builder

    return require_builder("verl", cfg.algorithm.name).build((cfg, paths))


class VerlEngine:
    """SFT: verl's SFTTrainer built in each of our ranks (any launcher), stepped by our loop so metric rows, checkpoints
    and stops go through the RunWriter and the StopSignal like every engine. RL: verl's PPO driver on Ray, followed
    from this process (rl.py); its rollouts need GPUs (preflight refuses it elsewhere)."""

    name = "verl"

    def train(self, cfg, run, *, loaded, resume_from, stop, writer, dist):
        if cfg.algorithm.name != "sft":
            from training_platform.training.engines.verl.rl import train_rl

            if dist.world_size != 1:
                raise RuntimeError("verl RL starts its own workers: the runner calls it in one process")
            paths = planned_paths(cfg, run.path)
            config = verl_config(cfg, paths)
            prepare_rl_inputs(cfg, run, loaded)
            return train_rl(cfg, run, paths, config, resume_from=resume_from, stop=stop, writer=writer)
        return _train_sft(cfg, run, loaded=loaded, resume_from=resume_from, stop=stop, writer=writer, dist=dist)


def _sft_rows(rows: list[dict]) -> list[list[dict]]:
    """Our canonical SFT rows as verl's `messages` column (prompt/completion becomes a user and an assistant turn)."""
    out = []
    for row in rows:
        if "messages" in row:
            out.append([{"role": m["role"], "content": m["content"]} for m in row["messages"]])
        elif "prompt" in row and "completion" in row:
            prompt, completion = row["prompt"], row["completion"]
            prompt = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            completion = completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
            out.append([*prompt, *completion])
        else:
            raise ValueError(
                "engine verl trains SFT on conversations (messages) or prompt/completion rows, not on plain text"
            )
    return out


def prepare_rl_inputs(cfg, run, loaded) -> None:
    """The files verl's RL trainer reads, made by rank 0 before it starts: the prompts in verl's parquet schema
    (the data factory's `verl` converter), the reward module, both recorded in the manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from training_platform.data.convert import convert_row
    from training_platform.training.engines.verl.rewards import write_reward_module

    paths = planned_paths(cfg, run.path)
    sources = [("data.train_file", paths.train_files)]
    if paths.val_files and "data.eval_file" in loaded:
        sources.append(("data.eval_file", paths.val_files))
    render = _prompt_renderer(cfg, paths) if paths.reward_model else None
    for field, target_file in sources:
        rows = [
            convert_row(row, "rl_prompt", "verl", index=i, data_source="training_platform")
            for i, row in enumerate(loaded[field][0])
        ]
        if render is not None:  # the reward model scores the prompt as the rollout saw it, then the completion
            for row in rows:
                row["extra_info"]["rm_prompt"] = render(row["prompt"])
        target = Path(target_file)
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), target.with_suffix(".tmp"))
        target.with_suffix(".tmp").replace(target)
        run.record("verl_data", target)
    if paths.reward_module:
        rewards = [r.model_dump() for r in cfg.rewards]
        write_reward_module(Path(paths.reward_module), rewards, reward_model=paths.reward_model is not None)
        run.record("verl_reward_fn", Path(paths.reward_module))
    if paths.tools_config and cfg.agent is not None:
        from training_platform.training.engines.verl.agent.tools import write_tools_config

        run.record("verl_tools", write_tools_config(Path(paths.tools_config), cfg.agent))


def _prompt_renderer(cfg, paths: VerlPaths):
    """prompt messages -> the text the rollout generates after: the policy tokenizer's chat template with the
    generation prompt, as verl's agent loop applies it."""
    from training_platform.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(paths.model)

    def render(messages: list[dict]) -> str:
        return str(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False))

    return render


def _write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.table({"messages": _sft_rows(rows)}), tmp)
    tmp.replace(path)


def _ensure_group(dist) -> None:
    """verl's trainers need a process group even for one process (local launcher): a gloo group of one."""
    import torch.distributed

    if torch.distributed.is_initialized():
        return
    import socket

    with socket.socket() as s:  # verl's workers read MASTER_ADDR/PORT: a private loopback rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1"
    )
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


def _train_sft(cfg, run, *, loaded, resume_from, stop, writer, dist):
    import time

    import torch
    from omegaconf import OmegaConf
    from tensordict.tensorclass import NonTensorData

    from training_platform.training.engines.verl import cpu, generate
    from training_platform.training.engines.verl.metrics import sft_record

    on_cpu = mapping.device(cfg) == "cpu"
    if on_cpu:
        cpu.install()
    _ensure_group(dist)
    paths = planned_paths(cfg, run.path)
    config = verl_config(cfg, paths)
    if resume_from is not None:
        step_dir = next(Path(resume_from).glob("global_step_*"))
        OmegaConf.update(config, "trainer.resume_mode", "resume_path")
        OmegaConf.update(config, "trainer.resume_from_path", str(step_dir))
    if writer.is_main:
        _write_parquet(loaded["data.train_file"][0], Path(paths.train_files))
        run.record("verl_data", Path(paths.train_files))
        if paths.val_files and "data.eval_file" in loaded:
            _write_parquet(loaded["data.eval_file"][0], Path(paths.val_files))
            run.record("verl_data", Path(paths.val_files))
        (run.path / "verl_config.yaml").write_text(generate.to_yaml(config))
        run.record("verl_config", run.path / "verl_config.yaml")
    dist.barrier()

    from verl.trainer.sft_trainer import SFTTrainer
    from verl.utils import tensordict_utils as tu

    log.info(
        "engine=verl algorithm=sft model=%s device=%s rank=%d/%d",
        paths.model,
        "cpu" if on_cpu else "cuda",
        dist.rank,
        dist.world_size,
    )
    writer.update_run_info(device="cpu" if on_cpu else "cuda", verl_version=generate.verl_version())
    trainer = SFTTrainer(config=config)
    step = trainer.resume_global_step
    total = trainer.total_training_steps
    meta = {
        "use_remove_padding": config.model.use_remove_padding,
        "use_dynamic_bsz": config.data.use_dynamic_bsz,
        "max_token_len_per_gpu": config.data.max_token_len_per_gpu,
        "micro_batch_size_per_gpu": config.data.micro_batch_size_per_gpu,
        "temperature": 1.0,
        "global_batch_size": trainer.global_batch_size,
        "pad_mode": config.data.pad_mode,
        "pad_token_id": trainer.model_config.tokenizer.pad_token_id,
    }
    save_every = cfg.training.save_steps
    log_every = cfg.training.logging_steps
    last_time = time.perf_counter()
    start_epoch = step // trainer.steps_per_epoch
    staging = Path(paths.local_dir)
    stopped = None

    def save(at: int) -> None:
        trainer.ckpt_handler.default_local_dir = str(staging / f"step_{at}")
        trainer.ckpt_handler.save_checkpoint(step=at)
        dist.barrier()
        writer.checkpoint_saved(at, staging / f"step_{at}")
        dist.barrier()

    for epoch in range(start_epoch, trainer.config.trainer.total_epochs):
        trainer.train_sampler.set_epoch(epoch=epoch)
        for data in trainer.train_dataloader:
            step += 1
            data = tu.get_tensordict(tensor_dict=data, non_tensor_dict=meta)
            seqlens = trainer._get_batch_seqlens(data=data)
            tu.assign_non_tensor(data, update_lr_scheduler=True, global_token_num=NonTensorData(seqlens))
            output = trainer.training_client.train_batch(data=data)
            if step % log_every == 0 or step >= total:
                now = time.perf_counter()
                record = sft_record(
                    step,
                    epoch + 1,
                    tu.get(output, "metrics"),
                    tokens=int(sum(seqlens)),
                    seconds=now - last_time,
                    steps=log_every,
                )
                last_time = now
                writer.log_metrics(record)
            last = step >= total
            eval_every = cfg.training.eval_steps
            if trainer.val_dataloader is not None and eval_every and (step % eval_every == 0 or last):
                writer.log_metrics(
                    {
                        "step": step,
                        "epoch": epoch + 1,
                        "ts": round(time.time(), 3),
                        "eval_loss": _validation_loss(trainer, meta, tu, torch),
                    }
                )
            if stop.poll(step) is not None:
                stopped = stop.stopped
            if last or stopped or step % save_every == 0:
                save(step)
            if last or stopped:
                break
        if step >= total or stopped:
            break
    if stopped is None:
        _save_final(cfg, run, writer, dist, trainer, torch)
    dist.barrier()
    from training_platform.training.engines.base import EngineResult

    return EngineResult(step=step, stopped=stopped, summary={})


def _validation_loss(trainer, meta: dict, tu, torch) -> float:
    """verl's validation, as its own fit() computes it: the mean loss of the eval batches, averaged over ranks."""
    losses = []
    for batch in trainer.val_dataloader:
        output = trainer.training_client.infer_batch(tu.get_tensordict(tensor_dict=batch, non_tensor_dict=meta))
        losses.append(tu.get(output, "metrics")["loss"])
    loss = torch.mean(torch.tensor(losses, dtype=torch.float32))
    group = trainer.engine.get_data_parallel_group()
    size = torch.distributed.get_world_size(group) if group is not None else 1
    if size > 1:  # gloo has no AVG
        torch.distributed.all_reduce(loss, op=torch.distributed.ReduceOp.SUM, group=group)
        loss = loss / size
    return float(loss)


def _save_final(cfg, run, writer, dist, trainer, torch) -> None:
    """final/ as an HF model in the model's own dtype (gathered from the FSDP shards on every rank)."""
    import shutil

    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM

    # A full state dict is flat: parameter name -> tensor (torch types it with every nested ValueType).
    state = cast(
        "dict[str, Tensor]",
        get_model_state_dict(trainer.engine.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True)),
    )
    if not writer.is_main:
        return
    model_path = planned_paths(cfg, run.path).model
    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=cfg.model.trust_remote_code)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(
        cfg.model.dtype, getattr(hf_config, "torch_dtype", None) or torch.float32
    )
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=cfg.model.trust_remote_code)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, assign=True, strict=False)
    model.tie_weights()
    tmp = run.path / ".final.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    trainer.model_config.tokenizer.save_pretrained(tmp)
    if run.final.exists():
        shutil.rmtree(run.final)
    tmp.rename(run.final)
    writer.record_tree("final", run.final)
    log.info("final model saved: %s (%s)", run.final, dtype)
