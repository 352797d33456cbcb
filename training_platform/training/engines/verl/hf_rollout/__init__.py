"""The `hf` rollout: verl's RL generates with plain transformers where vLLM / SGLang cannot run (docs/engines.md)."""
