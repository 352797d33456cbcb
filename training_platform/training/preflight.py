"""Layer 3 of config validation: the rules that need the disk (files, the model, the dataset rows, devices), and
`validate_config`, which runs the three layers (training/config.py has the first two).

Everything here runs before a single weight is loaded for training, so a bad config fails in seconds with every
problem listed, never half way through a run.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from training_platform.core.errors import FieldError
from training_platform.core.paths import display_path, resolve_data_path, resolve_model_ref
from training_platform.core.settings import current_settings
from training_platform.data.formats import DatasetError, load_examples
from training_platform.training.config import ConfigError, JobConfig, check_rules, dedupe, parse_config
from training_platform.training.engine_registry import engine_checks


def _load_model_config(ref: str, trust_remote_code: bool):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(ref, trust_remote_code=trust_remote_code)


def _check_model(path_field: str, ref: str, trust_remote_code: bool) -> tuple[Any, list[FieldError]]:
    resolved, is_local = resolve_model_ref(ref)
    if is_local and not (Path(resolved) / "config.json").is_file():
        return None, [
            FieldError(path_field, f"{display_path(resolved)} is not a Hugging Face model directory (no config.json)")
        ]
    looks_like_hub_id = not is_local and "/" in ref and not ref.startswith((".", "/", "~"))
    if not is_local and not looks_like_hub_id:
        return None, [FieldError(path_field, f"no such model directory: {display_path(resolve_data_path(ref))}")]
    if not is_local:
        # `org/name` could be a hub id or a mistyped local path: say both.
        try:
            return _load_model_config(resolved, trust_remote_code), []
        except Exception as exc:  # noqa: BLE001
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            shown = display_path(resolve_data_path(ref))
            return None, [
                FieldError(
                    path_field,
                    f"no such model directory: {shown}, and not "
                    f"loadable as a hub id (not cached, or the hub is unreachable): "
                    f"{first_line}",
                )
            ]
    try:
        return _load_model_config(resolved, trust_remote_code), []
    except Exception as exc:  # noqa: BLE001 - any loading failure is a config error for the user
        where = "local directory" if is_local else "hub id (not in the local cache, or the hub is unreachable)"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, [
            FieldError(
                path_field, f"cannot load the model config from {display_path(resolved)} as a {where}: {first_line}"
            )
        ]


def _linear_module_names(model_config) -> set[str]:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config)
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def _check_dataset(
    cfg: JobConfig, field: str, file: str, cache: dict | None, max_rows: int | None = None
) -> list[FieldError]:
    path = resolve_data_path(file)
    if not path.is_file():
        return [FieldError(field, f"no such file: {display_path(path)}")]
    limit = cfg.data.max_train_samples if field == "data.train_file" else None
    if max_rows is not None:
        limit = min(limit or max_rows, max_rows)
    try:
        rows, fmt = load_examples(
            path, kind=cfg.spec.data_kind, fmt=cfg.data.format, field_map=cfg.data.field_map, limit=limit
        )
    except DatasetError as exc:
        errors = [FieldError(field, f"{path.name}: {e}") for e in exc.rows]
        if exc.total_bad > len({e.line for e in exc.rows}):
            errors.append(FieldError(field, f"{path.name}: {exc.total_bad} bad rows in all"))
        return errors
    except (OSError, UnicodeDecodeError) as exc:
        return [FieldError(field, f"cannot read {display_path(path)}: {exc}")]
    if cache is not None:
        cache[field] = (rows, fmt, path)
    errors = []
    if cfg.spec.uses_reward_functions:
        for i, reward in enumerate(cfg.rewards):
            column = reward.params.get("answer_field", "answer" if reward.name == "math_answer" else None)
            if column and column not in rows[0]:
                errors.append(
                    FieldError(
                        f"rewards[{i}].params.answer_field",
                        f"column {column!r} is not in {path.name} (fields: {sorted(rows[0])}); "
                        f"map it with data.field_map",
                    )
                )
    needs_chat = fmt in ("messages", "sharegpt", "alpaca") or isinstance(rows[0].get("prompt"), list)
    if cache is not None:
        cache.setdefault("needs_chat_template", needs_chat)
    return errors


def validate_config(
    raw: Any, *, check_disk: bool = True, loaded: dict | None = None, dry_run: bool = False
) -> JobConfig:
    """All three layers; raises ConfigError listing every problem found. `loaded` receives the datasets read
    while checking them, so a run does not read them twice. `dry_run`: skip what only a real start needs (the
    devices verl's RL runs on)."""
    cfg = parse_config(raw)
    errors = check_rules(cfg)
    if check_disk:
        errors.extend(check_environment(cfg, loaded, dry_run=dry_run))
    if errors:
        raise ConfigError(dedupe(errors))
    return cfg


def check_environment(
    cfg: JobConfig,
    cache: dict | None = None,
    *,
    dry_run: bool = False,
    devices: bool = True,
    max_rows: int | None = None,
    run_model_code: bool = True,
) -> list[FieldError]:
    """Disk/device rules. `cache`, when given, receives the loaded datasets so the run does not read them twice.

    The API's validation (`POST /jobs/validate`) runs them with `devices=False` (the API's host is not the
    worker's), `max_rows` (a bounded read of each dataset) and `run_model_code=False` (a `trust_remote_code` model's
    own code runs in its job, never in the API)."""
    errors: list[FieldError] = []
    cache = cache if cache is not None else {}

    errors += _check_dataset(cfg, "data.train_file", cfg.data.train_file, cache, max_rows)
    if cfg.data.eval_file is not None:
        errors += _check_dataset(cfg, "data.eval_file", cfg.data.eval_file, cache, max_rows)

    if cfg.model.trust_remote_code and not run_model_code:
        return errors
    model_config, model_errors = _check_model("model.path", cfg.model.path, cfg.model.trust_remote_code)
    errors += model_errors
    if model_config is not None:
        context = getattr(model_config, "max_position_embeddings", None)
        if context is not None and cfg.data.max_length > context:
            errors.append(
                FieldError(
                    "data.max_length", f"must be <= the model's context length ({context}), got {cfg.data.max_length}"
                )
            )
        lora = cfg.model.lora
        if lora is not None and lora.target_modules != "all-linear":
            try:
                available = _linear_module_names(model_config)
            except Exception as exc:  # noqa: BLE001
                errors.append(FieldError("model.lora.target_modules", f"cannot inspect the model's layers: {exc}"))
            else:
                for i, target in enumerate(lora.target_modules):
                    if target.rsplit(".", 1)[-1] not in available:
                        errors.append(
                            FieldError(
                                f"model.lora.target_modules[{i}]",
                                f"{target!r} matches no linear layer of the model; "
                                f"available: {', '.join(sorted(available))}",
                            )
                        )
        if not model_errors:
            errors += _check_tokenizer(cfg, cache)
        errors += _check_memory(cfg, model_config, cache, devices=devices)

    if cfg.algorithm.name == "ppo":
        for field in ("reward_model_path", "value_model_path"):
            ref = getattr(cfg.algorithm, field)
            if ref is not None:
                errors += _check_model(f"algorithm.{field}", ref, cfg.model.trust_remote_code)[1]

    if devices:
        errors += _check_devices(cfg)
    if cfg.agent is not None:
        errors += _check_agent_tools(cfg, on_worker=devices)
    if not dry_run and cfg.spec.uses_reward_functions:
        errors += _probe_judges(cfg, cache)
    if not errors:
        errors += engine_checks(cfg.engine).preflight_problems(cfg, cache, dry_run=dry_run)
    for tracker, module in (("wandb", "wandb"), ("mlflow", "mlflow"), ("tensorboard", "tensorboard")):
        if tracker in cfg.tracking.report_to and importlib.util.find_spec(module) is None:
            errors.append(FieldError("tracking.report_to", f"{tracker} is not installed (pip install {module})"))
    return errors


def _probe_judges(cfg: JobConfig, cache: dict) -> list[FieldError]:
    """Each `llm_judge` reward answers one real call (training/rewards/llm_judge.py `probe_judge`); the results go
    to cache["judge_probe"] (the runner writes them to <run dir>/judge_probe.json). Not in --dry-run."""
    from training_platform.training.rewards.llm_judge import probe_judge

    errors, probes = [], []
    for i, reward in enumerate(cfg.rewards):
        if reward.name != "llm_judge":
            continue
        try:
            result = probe_judge(reward.params)
        except Exception as exc:  # noqa: BLE001 - a broken endpoint definition is the job's error, not a crash
            result = {
                "ok": False,
                "endpoint": reward.params.get("endpoint"),
                "model": reward.params.get("model"),
                "error": f"{type(exc).__name__}: {str(exc)[:300]}",
            }
        probes.append({"reward_index": i, **result})
        if not result["ok"]:
            errors.append(
                FieldError(
                    f"rewards[{i}]",
                    f"llm_judge: endpoint {result.get('endpoint')!r} (model "
                    f"{result.get('model')!r}) did not pass the probe call: "
                    f"{result.get('error')}",
                )
            )
    if probes:
        cache["judge_probe"] = probes
    return errors


def _agent_tools(cfg: JobConfig) -> list[tuple[int, Any]]:
    """(index, built params) of the job's agent tools whose name and params the config rules accept."""
    from pydantic import ValidationError

    from training_platform.training.tools import TOOLS

    out = []
    for i, tool in enumerate(cfg.agent.tools if cfg.agent is not None else []):
        definition = TOOLS.get(tool.name)
        if definition is None:
            continue
        try:
            out.append((i, definition.params_model.model_validate(tool.params)))
        except ValidationError:
            continue  # reported by the config rules
    return out


def _check_agent_tools(cfg: JobConfig, *, on_worker: bool) -> list[FieldError]:
    """What each agent tool needs here (training/tools: ToolParams.preflight): the python tool a working sandbox,
    http_endpoint its endpoint defined. `on_worker` False (the API): host facts are left to the worker."""
    assert cfg.agent is not None
    errors = []
    for i, params in _agent_tools(cfg):
        for field, reason in params.preflight(on_worker=on_worker):
            path = f"agent.tools[{i}]" + (f".params.{field}" if field else "")
            errors.append(FieldError(path, reason))
    return errors


def _check_tools_template(cfg: JobConfig, tokenizer: Any) -> list[FieldError]:
    """The model's chat template shows the agent's tools to the model: rendered with `tools=[schema, ...]`, every
    tool's name is in the prompt (a template without tool support renders none, and the model would never learn
    they exist)."""
    from training_platform.training.tools import tool_schema

    tools = _agent_tools(cfg)
    if not tools:
        return []
    assert cfg.agent is not None
    names = [cfg.agent.tools[i].name for i, _ in tools]
    schemas = [tool_schema(cfg.agent.tools[i].name, params) for i, params in tools]
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "?"}], tools=schemas, tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # noqa: BLE001 - any template failure is the job's problem, reported at its field
        return [FieldError("agent.tools", f"the model's chat template cannot render tools: {str(exc)[:300]}")]
    missing = [name for name in names if name not in text]
    if missing:
        return [
            FieldError(
                "agent.tools",
                f"the model's chat template does not show tools to the model ({', '.join(missing)} missing from the "
                "prompt rendered with tools=[...]): use a model whose template renders tools",
            )
        ]
    return []


def _check_tokenizer(cfg: JobConfig, cache: dict) -> list[FieldError]:
    from transformers import AutoTokenizer

    ref, _ = resolve_model_ref(cfg.model.path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, trust_remote_code=cfg.model.trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        return [FieldError("model.path", f"cannot load the tokenizer: {str(exc).strip().splitlines()[0]}")]
    errors = []
    template = getattr(tokenizer, "chat_template", None)
    if cache.get("needs_chat_template") and not template:
        errors.append(
            FieldError(
                "data.train_file",
                "the data is conversational but the tokenizer has no chat "
                "template; use plain text / prompt-completion strings",
            )
        )
    if getattr(cfg.algorithm, "assistant_only_loss", False) and template and "generation" not in template:
        errors.append(
            FieldError("algorithm.assistant_only_loss", "the tokenizer's chat template has no {% generation %} markers")
        )
    if cfg.agent is not None:
        errors += _check_tools_template(cfg, tokenizer)
    return errors


def _check_memory(cfg: JobConfig, model_config: Any, cache: dict, *, devices: bool) -> list[FieldError]:
    """The peak memory per device, estimated from the model's config before any weight is read
    (training/memory.py): `cache["memory"]` (its as_dict) for the API and `tp train --dry-run`; refused at
    `resources` when it cannot fit this node's device (`devices=False`, the API: only estimated, the worker's
    preflight judges). An architecture the estimate does not know is `cache["memory_warning"]`, never a refusal."""
    from training_platform.training import memory

    device = _target_device(cfg)  # the API's host stands in for the worker's when the config says `auto`
    try:
        found = memory.estimate(cfg, model_config.to_dict(), device)
    except KeyError as exc:
        cache["memory_warning"] = f"cannot estimate the memory this job needs: the model's config has no {exc}"
        return []
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        cache["memory_warning"] = f"cannot estimate the memory this job needs: an unexpected model config ({exc})"
        return []
    cache["memory"] = found.as_dict()
    if not devices:
        return []
    capacity, what = _device_capacity(cfg, device)
    if capacity is None or found.total <= capacity:
        return []
    return [
        FieldError(
            "resources",
            f"needs {found.describe()}; {what} has {capacity / memory.GIB:.0f} GiB "
            "(smaller per_device_batch_size, gradient_checkpointing, LoRA or more memory)",
        )
    ]


def _target_device(cfg: JobConfig) -> str:
    """The device this node would train on (the engine's `pick_device` rule, without importing it)."""
    if cfg.resources.device != "auto":
        return cfg.resources.device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def _device_capacity(cfg: JobConfig, device: str) -> tuple[int | None, str]:
    """Bytes one process may use on this node: the smallest visible GPU, or the RAM shared by the node's
    processes. (None: not known here, e.g. a Ray run's remote nodes, which Ray places.)"""
    if cfg.resources.resolved_launcher == "ray":
        return None, ""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return None, ""
        smallest = min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
        return smallest, "this node's smallest GPU"
    import psutil

    per_process = psutil.virtual_memory().total // cfg.resources.num_devices
    share = f" / {cfg.resources.num_devices} processes" if cfg.resources.num_devices > 1 else ""
    return per_process, f"this node's RAM{share}"


def _check_devices(cfg: JobConfig) -> list[FieldError]:
    """This node's devices, or the Ray cluster's. Several CPU processes are fine (gloo); CUDA needs one device per
    process."""
    device, wanted = cfg.resources.device, cfg.resources.num_devices
    address = current_settings().ray_address
    if cfg.resources.resolved_launcher == "ray" and address:  # no address: a config rule already says so
        from training_platform.training import ray_cluster

        r = cfg.resources
        return [
            FieldError(field, reason)
            for field, reason in ray_cluster.check(
                address, num_nodes=r.num_nodes, num_devices=r.num_devices, use_gpu=device == "cuda"
            )
        ]
    if device == "cpu":  # any number of CPU processes; fp16 / QLoRA on cpu are config rules (check_rules)
        return []
    import torch

    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    errors = []
    if device == "cuda" and available == 0:
        errors.append(FieldError("resources.device", "cuda was requested but no CUDA device is available"))
    mps = getattr(torch.backends, "mps", None)
    if device == "mps" and not (mps is not None and mps.is_available()):
        errors.append(FieldError("resources.device", "mps was requested but no Apple GPU (MPS) is available"))
    uses_cuda = device == "cuda" or (device == "auto" and available > 0)
    if uses_cuda and 0 < available < wanted:
        errors.append(
            FieldError(
                "resources.num_devices",
                f"{wanted} processes per node need {wanted} CUDA devices; {available} available on this node",
            )
        )
    if cfg.model.dtype == "fp16" and available == 0:
        errors.append(FieldError("model.dtype", "fp16 training needs a CUDA device; use fp32 or bf16"))
    if cfg.model.lora is not None and cfg.model.lora.quantization != "none":
        if available == 0:
            errors.append(FieldError("model.lora.quantization", "QLoRA (4bit/8bit) needs a CUDA device"))
        elif importlib.util.find_spec("bitsandbytes") is None:
            errors.append(FieldError("model.lora.quantization", "QLoRA needs bitsandbytes (pip install bitsandbytes)"))
    return errors
