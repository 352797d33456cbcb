"""The TRL engine: transformers/TRL trainers in this process (one rank of several under torchrun or Ray).

It loads the model, tokenizer and datasets, maps the shared config sections onto TrainingArguments, lets the
algorithm's registered builder (`builders.py`) make its TRL trainer, trains (resuming from a checkpoint when asked)
and saves the final model. Metric rows and checkpoints go through the RunWriter; stops through the StopSignal.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training_platform.core.paths import resolve_model_ref
from training_platform.training.config import JobConfig
from training_platform.training.distributed import DistContext
from training_platform.training.engines import require_builder
from training_platform.training.engines.base import EngineResult
from training_platform.training.engines.trl.callbacks import CheckpointCallback, MetricsCallback, StopCallback
from training_platform.training.engines.trl.hooks import TRLHooks
from training_platform.training.rollouts import RolloutWriter
from training_platform.training.run_writer import RunWriter
from training_platform.training.rundir import RunDir
from training_platform.training.stop_signal import StopSignal

log = logging.getLogger("training_platform.train")

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class TrainContext:
    """Everything an algorithm module needs to build its trainer."""

    cfg: JobConfig
    run: RunDir
    model_path: str
    model: Any
    tokenizer: Any
    train_dataset: Any
    eval_dataset: Any
    common_args: dict[str, Any]
    callbacks: list
    peft_config: Any = None
    reward_funcs: list = field(default_factory=list)
    reward_weights: list[float] | None = None
    world_size: int = 1
    torch_dtype: Any = None

    def resolve(self, ref: str) -> str:
        return resolve_model_ref(ref)[0]

    @property
    def trainer_kwargs(self) -> dict[str, Any]:
        """What every TRL trainer takes the same way (the builders add `args` and their own extras)."""
        return {
            "model": self.model,
            "train_dataset": self.train_dataset,
            "eval_dataset": self.eval_dataset,
            "processing_class": self.tokenizer,
            "callbacks": self.callbacks,
            "peft_config": self.peft_config,
        }

    def model_load_kwargs(self) -> dict[str, Any]:
        return {"dtype": self.torch_dtype, "trust_remote_code": self.cfg.model.trust_remote_code}


def pick_device(cfg: JobConfig) -> str:
    """`auto`: cuda, then mps (Apple GPU), then cpu. An explicit device was checked by preflight."""
    wanted = cfg.resources.device
    if wanted != "auto":
        return wanted
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def _torch_dtype(cfg: JobConfig, cuda: bool):
    import torch

    name = cfg.model.dtype
    if name == "auto":
        name = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    return getattr(torch, DTYPES[name]), name


def common_training_args(
    cfg: JobConfig, run: RunDir, *, device: str, dtype_name: str, world_size: int = 1
) -> dict[str, Any]:
    """The config sections every algorithm shares, as TrainingArguments keywords."""
    cuda = device == "cuda"
    t = cfg.training
    report_to = [r for r in cfg.tracking.report_to if r != "none"] or "none"
    warmup = t.warmup_steps if t.warmup_steps else t.warmup_ratio  # a float < 1 is a ratio in transformers 5
    args: dict[str, Any] = dict(
        output_dir=str(run.checkpoints),
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=warmup,
        num_train_epochs=t.num_epochs,
        max_steps=t.max_steps if t.max_steps is not None else -1,
        per_device_train_batch_size=t.per_device_batch_size,
        per_device_eval_batch_size=t.per_device_eval_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        max_grad_norm=t.max_grad_norm,
        weight_decay=t.weight_decay,
        optim=t.optimizer,
        seed=t.seed,
        data_seed=t.seed,
        logging_steps=t.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=None,  # rotation is ours (RunWriter), over the step_NNNNNN layout
        eval_strategy="steps" if t.eval_steps else "no",
        eval_steps=t.eval_steps,
        report_to=report_to,
        run_name=cfg.tracking.run_name or run.path.name,
        logging_dir=str(run.path / "tensorboard"),
        use_cpu=device == "cpu",
        # Several ranks: gloo on CPU; the last uneven batch of an epoch is dropped, not padded by repeating rows
        # (which would weigh them twice); the runner logs how many rows that leaves out.
        ddp_backend=("nccl" if cuda else "gloo") if world_size > 1 else None,
        ddp_find_unused_parameters=False if world_size > 1 else None,  # every parameter is used: no extra pass
        dataloader_drop_last=world_size > 1,
        bf16=dtype_name == "bf16",
        fp16=dtype_name == "fp16",
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        dataloader_num_workers=t.dataloader_num_workers,
        # RL batches carry no input_ids: counting would only log a warning every step.
        include_num_input_tokens_seen="no" if cfg.spec.data_kind == "rl" else "non_padding",
        disable_tqdm=False,
    )
    if cfg.tracking.project and "wandb" in cfg.tracking.report_to:
        import os

        os.environ.setdefault("WANDB_PROJECT", cfg.tracking.project)
    if cfg.tracking.project and "mlflow" in cfg.tracking.report_to:
        import os

        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", cfg.tracking.project)
    return args


def _peft_config(cfg: JobConfig):
    lora = cfg.model.lora
    if lora is None:
        return None
    from peft import LoraConfig

    task = "SEQ_CLS" if cfg.spec.model_kind == "sequence_classification" else "CAUSAL_LM"
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        task_type=task,
        target_modules=lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules),
    )


def _to_dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list(rows)


class TRLEngine:
    name = "trl"

    def train(
        self,
        cfg: JobConfig,
        run: RunDir,
        *,
        loaded: dict,
        resume_from: Path | None,
        stop: StopSignal,
        writer: RunWriter,
        dist: DistContext,
    ) -> EngineResult:
        import transformers
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

        from training_platform.training.rewards import build_reward_function

        spec = cfg.spec
        builder = require_builder(self.name, spec.name)
        hooks: TRLHooks = builder.hooks or TRLHooks()
        transformers.set_seed(cfg.training.seed)
        device = pick_device(cfg)
        cuda = device == "cuda"
        dtype, dtype_name = _torch_dtype(cfg, cuda)
        model_path, _ = resolve_model_ref(cfg.model.path)
        log.info(
            "engine=trl algorithm=%s model=%s device=%s dtype=%s rank=%d/%d",
            spec.name,
            model_path,
            device,
            dtype_name,
            dist.rank,
            dist.world_size,
        )
        writer.update_run_info(device=device, dtype=dtype_name)
        if device == "cpu" and dist.world_size > 1:
            # accelerate names the device of a CPU rank `cpu:<local rank>`, and Trainer's resume then loads the
            # optimizer with map_location="cpu:0", which torch cannot restore: every CPU rank uses plain "cpu".
            os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"

        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=cfg.model.trust_remote_code)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token

        load_kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": cfg.model.trust_remote_code}
        lora = cfg.model.lora
        if lora is not None and lora.quantization != "none":
            from transformers import BitsAndBytesConfig

            load_kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=lora.quantization == "4bit",
                load_in_8bit=lora.quantization == "8bit",
                bnb_4bit_compute_dtype=dtype,
            )
        if spec.model_kind == "sequence_classification":
            model = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1, **load_kwargs)
            model.config.pad_token_id = tokenizer.pad_token_id
        else:
            model = AutoModelForCausalLM.from_pretrained(model_path, **load_kwargs)

        train_rows, _, _ = loaded["data.train_file"]
        train_dataset = _to_dataset(train_rows)
        eval_dataset = None
        if "data.eval_file" in loaded:
            eval_dataset = _to_dataset(loaded["data.eval_file"][0])
        elif cfg.data.eval_split > 0:
            split = train_dataset.train_test_split(test_size=cfg.data.eval_split, seed=cfg.data.shuffle_seed)
            train_dataset, eval_dataset = split["train"], split["test"]
        train_dataset = hooks.prepare_dataset(train_dataset, tokenizer, cfg)
        if eval_dataset is not None:
            eval_dataset = hooks.prepare_dataset(eval_dataset, tokenizer, cfg)
        if not cfg.training.eval_steps:
            eval_dataset = None  # TRL preprocesses eval data even when it never evaluates
        buckets = None
        if cfg.data.sampling is not None:  # difficulty buckets of the rows the trainer gets (training/sampling.py)
            from training_platform.training.sampling import row_buckets

            buckets = row_buckets(train_dataset.to_list())

        reward_funcs, reward_weights = [], None
        if spec.uses_reward_functions:
            from training_platform.training.rewards.weights import check_reward_weights

            reward_funcs = [build_reward_function(r.name, r.params) for r in cfg.rewards]
            _, weight_warnings, reward_weights = check_reward_weights(cfg.rewards, mode=cfg.training.reward_weights)
            for warning in weight_warnings if writer.is_main else ():
                log.warning(warning)

        from training_platform.training.rewards.llm_judge import judge_metrics_source

        metrics = MetricsCallback(
            writer,
            loss_from=hooks.loss_from(cfg),
            extra=judge_metrics_source(reward_funcs, writer),
        )
        callbacks = [
            metrics,
            CheckpointCallback(writer, dist),
            StopCallback(stop, raise_on_stop=not builder.capabilities.resume),
        ]
        rollouts = _rollout_callback(cfg, run, dist, tokenizer, hooks)
        if rollouts is not None:
            callbacks.insert(1, rollouts)  # after the metric row of the same step
        ctx = TrainContext(
            cfg=cfg,
            run=run,
            model_path=model_path,
            model=model,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            common_args=common_training_args(
                cfg, run, device=device, dtype_name=dtype_name, world_size=dist.world_size
            ),
            callbacks=callbacks,
            peft_config=_peft_config(cfg),
            reward_funcs=reward_funcs,
            reward_weights=reward_weights,
            world_size=dist.world_size,
            torch_dtype=dtype,
        )
        if dist.world_size > 1 and writer.is_main:
            global_batch = cfg.training.per_device_batch_size * dist.world_size
            left = len(train_dataset) % global_batch
            if left:
                log.warning(
                    "%d training rows (counted before the trainer's own filtering) do not fill a last "
                    "batch of %d (%d per rank x %d ranks): they are dropped each epoch, not padded",
                    left,
                    global_batch,
                    cfg.training.per_device_batch_size,
                    dist.world_size,
                )
                writer.update_run_info(rows_dropped_per_epoch=left)
        trainer = builder.build(ctx)
        if buckets is not None:
            _install_sampling(cfg, run, writer, trainer, buckets, dist)
        if rollouts is not None:
            rollouts.bind(trainer)
        if resume_from is not None:
            trainer.train(resume_from_checkpoint=str(resume_from))
        else:
            trainer.train()

        step = trainer.state.global_step
        if stop.stopped is not None and step < trainer.state.max_steps:
            return EngineResult(step=step, stopped=stop.stopped, summary=metrics.summary)
        if stop.stopped is not None:  # the request came with (or after) the last step: nothing is left to train
            log.info("stop (%s) at step %d, the last one: the run is complete", stop.stopped, step)
        if writer.is_main:
            self._save_final(cfg, run, writer, hooks.final_model(trainer), tokenizer)
        dist.barrier()  # no rank exits (tearing down the group) before the final model is written
        return EngineResult(step=step, stopped=None, summary=metrics.summary)

    def _save_final(self, cfg: JobConfig, run: RunDir, writer: RunWriter, model, tokenizer) -> None:
        final = run.final
        tmp = run.path / ".final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        if cfg.model.lora is not None:
            adapter_dir = run.path / "final_adapter"
            shutil.rmtree(adapter_dir, ignore_errors=True)
            model.save_pretrained(adapter_dir)
            tokenizer.save_pretrained(adapter_dir)
            writer.record_tree("final_adapter", adapter_dir)
            model = model.merge_and_unload() if cfg.model.lora.merge_final else None
        if model is not None:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
            writer.record_tree("final", final)
        log.info("final model saved: %s", final if model is not None else run.path / "final_adapter")


def _rollout_callback(cfg: JobConfig, run: RunDir, dist: DistContext, tokenizer, hooks: TRLHooks):
    """RL: the callback that keeps a sample of each logging step's rollouts (rollouts.jsonl), or None."""
    if cfg.spec.data_kind != "rl" or cfg.training.rollout_samples_per_step == 0:
        return None
    return hooks.rollout_callback(cfg, RolloutWriter.for_job(cfg, run, rank=dist.rank), tokenizer)


def _install_sampling(cfg: JobConfig, run: RunDir, writer: RunWriter, trainer, buckets, dist: DistContext) -> None:
    """data.sampling: the difficulty sampler replaces the trainer's (every rank: the same stream, sharded by
    accelerate); rank 0 records sampling.json (buckets, stages, rows per step by bucket) in the run and manifest."""
    import json

    from training_platform.training import sampling

    s = cfg.data.sampling
    assert s is not None  # train() installs a sampler only for a job with data.sampling
    if s.strategy == "uniform":
        record = sampling.uniform_record(
            buckets, seed=s.seed if s.seed is not None else cfg.training.seed, world_size=dist.world_size
        )
    else:
        record = sampling.install_sampler(cfg, trainer, buckets, world_size=dist.world_size)
    if writer.is_main:
        path = run.path / "sampling.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        run.record("sampling", path)
        writer.update_run_info(sampling={"strategy": record["strategy"], "bucket_rows": record["bucket_rows"]})
        log.info(
            "data.sampling %s: rows per bucket %s%s",
            record["strategy"],
            record["bucket_rows"],
            "".join(
                f"; stage {i} steps {st['steps']} drew {st['drawn_mix']}"
                for i, st in enumerate(record.get("stages", []))
            ),
        )
