"""verl/utils/model.py, `load_valuehead_model` (the PPO critic's model loader), twice:

    attn_implementation="flash_attention_2",

flash-attention does not exist on CPU. The patched loader is verl's own source with that argument replaced by
`sdpa`; it is installed only on the CPU platform (plugin.py), so GPUs keep verl's loader."""

from __future__ import annotations

import inspect

REPLACED = 'attn_implementation="flash_attention_2",'
OCCURRENCES = 2
_applied = False


def needed() -> bool:
    from verl.utils import model

    return inspect.getsource(model.load_valuehead_model).count(REPLACED) == OCCURRENCES


def apply(attn_implementation: str = "sdpa") -> None:
    global _applied
    if _applied:
        return
    from verl.utils import model

    source = inspect.getsource(model.load_valuehead_model)
    if source.count(REPLACED) != OCCURRENCES:
        raise RuntimeError(f"verl changed load_valuehead_model: the patch of {REPLACED!r} is stale")
    patched = source.replace(REPLACED, f'attn_implementation="{attn_implementation}",')
    namespace: dict = {}
    exec(compile(patched, inspect.getsourcefile(model) or "verl/utils/model.py", "exec"), model.__dict__, namespace)  # noqa: S102 - verl's own source, one argument changed
    model.load_valuehead_model = namespace["load_valuehead_model"]
    _applied = True
