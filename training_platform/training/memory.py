"""Peak memory per device of a training job, estimated from the model's `config.json` before any weight is read.

Parts (bytes; `MemoryEstimate.parts`):
- weights: every parameter at the training dtype (QLoRA: 4 or 8 bits for the frozen base);
- gradients and optimizer: the trainable parameters only (LoRA: the adapters). AdamW keeps two states per
  parameter in the parameter's dtype, 8-bit AdamW two bytes, Adafactor about a tenth of AdamW, SGD none;
- activations: per layer and token, Korthikanti et al. 2022 ("Reducing Activation Recomputation", eq. 2): about
  s*b*h*(34 + 5*a*s/h) bytes at 16 bits (double at fp32); gradient checkpointing keeps each layer's input only,
  plus one layer's full activations. Preference algorithms run chosen and rejected: twice the sequences;
- logits: batch x sequence x vocabulary in fp32, with their gradient (the largest single tensor of small models);
- reference: a frozen copy of the weights where the algorithm needs one (DPO, KTO; RL with beta > 0; PPO) and the
  model is not LoRA (PEFT's reference is the base with adapters off); PPO adds its value model (trained) and reward
  model (frozen);
- kv_cache: RL generation: 2 (K and V) x layers x kv heads x head dim x the generation batch x (prompt + completion);
- runtime: the framework itself (CUDA context and allocator slack, or the Python process with torch on CPU).

Data parallel training (local, torchrun, Ray) replicates the model on every process: no part shrinks with the world
size. `bench/memory.py` measures the estimate against the real peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
# The framework's own memory. cpu: the Python process with torch and transformers as bench/memory.py measured it
# (the demo model's peak is 0.59 GiB, its tensors ~0.1). cuda and mps: a CUDA context and allocator slack as
# commonly reported, not measured here (no GPU on these machines).
RUNTIME_BYTES = {"cuda": int(0.75 * GIB), "cpu": int(0.45 * GIB), "mps": int(0.5 * GIB)}
REFERENCE_ALGORITHMS = {"dpo", "kto"}  # always a reference model (SimPO and ORPO are reference-free)
RL_ALGORITHMS = {"grpo", "rloo", "reinforce_pp", "ppo"}


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a decoder's `config.json`."""

    hidden: int
    layers: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    tied_embeddings: bool
    gated_mlp: bool = True
    qkv_bias: bool = False  # Qwen2 has biases on q, k and v

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """KeyError naming the first field a decoder config lacks."""

        def first(*names: str, default: Any = None) -> Any:
            for name in names:
                if config.get(name) is not None:
                    return config[name]
            if default is not None:
                return default
            raise KeyError(names[0])

        hidden = int(first("hidden_size", "n_embd", "d_model"))
        heads = int(first("num_attention_heads", "n_head"))
        return cls(
            hidden=hidden,
            layers=int(first("num_hidden_layers", "n_layer", "num_layers")),
            intermediate=int(first("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)),
            vocab=int(first("vocab_size")),
            heads=heads,
            kv_heads=int(first("num_key_value_heads", default=heads)),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            gated_mlp=str(config.get("hidden_act", config.get("activation_function", "silu"))) in {"silu", "swiglu"},
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") in {"qwen2", "qwen2_moe"})),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_parameters(self) -> int:
        kv = self.kv_heads * self.head_dim
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * kv  # q, o; k, v
        if self.qkv_bias:
            attention += self.hidden + 2 * kv
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate
        return attention + mlp + 2 * self.hidden  # + the two norms

    def parameters(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return embeddings + self.layers * self.layer_parameters() + self.hidden

    def lora_parameters(self, rank: int, targets: list[str] | str) -> int:
        """Adapters on the named linear layers of every block ("all-linear": all seven)."""
        kv = self.kv_heads * self.head_dim
        shapes = {
            "q_proj": (self.hidden, self.hidden),
            "k_proj": (self.hidden, kv),
            "v_proj": (self.hidden, kv),
            "o_proj": (self.hidden, self.hidden),
            "gate_proj": (self.hidden, self.intermediate),
            "up_proj": (self.hidden, self.intermediate),
            "down_proj": (self.intermediate, self.hidden),
        }
        names = list(shapes) if targets == "all-linear" else [t.rsplit(".", 1)[-1] for t in targets]
        per_layer = sum(rank * (shapes[n][0] + shapes[n][1]) for n in names if n in shapes)
        return self.layers * per_layer


@dataclass
class MemoryEstimate:
    device: str
    parameters: int
    trainable: int
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        """ "~212 GiB per device: weights 131, optimizer 65, ..." (GiB, largest first)."""
        shown = ", ".join(f"{name} {_gib(size)}" for name, size in sorted(self.parts.items(), key=lambda p: -p[1]))
        return f"~{_gib(self.total)} GiB per device: {shown}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "parameters": self.parameters,
            "trainable_parameters": self.trainable,
            "total_gib": round(self.total / GIB, 3),
            "parts_gib": {name: round(size / GIB, 3) for name, size in self.parts.items()},
            "summary": self.describe(),
        }


def _gib(size: int) -> str:
    value = size / GIB
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}" if value >= 0.01 else "<0.01"


def estimate(cfg: Any, model_config: dict[str, Any], device: str) -> MemoryEstimate:
    """The peak per device of the job `cfg` (a JobConfig) on `device` ("cuda", "cpu", "mps").
    KeyError when `model_config` is not a decoder config this understands."""
    shape = ModelShape.from_config(model_config)
    algorithm = cfg.algorithm
    name = algorithm.name
    dtype = cfg.model.dtype
    if dtype == "auto":  # the engine's rule (engines/trl/engine.py): bf16 on a GPU that has it, else fp32
        dtype = "bf16" if device == "cuda" else "fp32"
    width = DTYPE_BYTES[dtype]
    params = shape.parameters()
    lora = cfg.model.lora
    quantized = lora is not None and lora.quantization != "none"
    trainable = shape.lora_parameters(lora.r, lora.target_modules) if lora is not None else params

    base_width = {"4bit": 0.5, "8bit": 1.0}.get(lora.quantization, width) if quantized and lora is not None else width
    parts: dict[str, int] = {"weights": int(params * base_width + (trainable * width if lora is not None else 0))}
    parts["gradients"] = trainable * width
    optimizer = cfg.training.optimizer
    per_param = {"adamw_8bit": 2.0, "adafactor": 0.2 * width, "sgd": 0.0}.get(optimizer, 2.0 * width)
    parts["optimizer"] = int(trainable * per_param)

    batch = cfg.training.per_device_batch_size
    seq = cfg.data.max_length
    if name in RL_ALGORITHMS:
        prompt = getattr(algorithm, "max_prompt_length", None) or seq
        seq = min(prompt + getattr(algorithm, "max_completion_length", 0), max(seq, prompt))
    sequences = batch * (2 if cfg.spec.data_kind == "preference" else 1)
    per_layer = seq * sequences * shape.hidden * (34 + 5 * shape.heads * seq / shape.hidden) * (width / 2)
    if cfg.model.gradient_checkpointing:
        activations = shape.layers * seq * sequences * shape.hidden * width + per_layer
    else:
        activations = shape.layers * per_layer
    parts["activations"] = int(activations)
    parts["logits"] = int(2 * sequences * seq * shape.vocab * 4)

    needs_reference = name in REFERENCE_ALGORITHMS or (name in RL_ALGORITHMS and getattr(algorithm, "beta", 0) > 0)
    if needs_reference and lora is None:
        parts["reference"] = params * width
    if name == "ppo":  # a value model (trained) and a reward model (frozen), both the policy's size here
        parts["value_model"] = params * width * 4  # weights, gradients, two AdamW states
        parts["reward_model"] = params * width
    if name in RL_ALGORITHMS:
        parts["kv_cache"] = int(2 * shape.layers * shape.kv_heads * shape.head_dim * batch * seq * width)
    parts["runtime"] = RUNTIME_BYTES.get(device, RUNTIME_BYTES["cpu"])
    return MemoryEstimate(device=device, parameters=params, trainable=trainable, parts=parts)
