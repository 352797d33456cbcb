"""Loading a tokenizer for the data factory (chat-template previews, token lengths, perplexity, token-based
filters): a module of its own, below the operations that use it, so none of them imports another to get one."""

from __future__ import annotations

from pathlib import Path


def local_tokenizer_dir(name_or_path: str | Path) -> Path | None:
    """The local tokenizer directory `name_or_path` names (as given, else relative to TP_DATA_DIR like job config
    paths), absolute; None when it names none (a hub id)."""
    from training_platform.core.paths import resolve_data_path

    for path in (Path(name_or_path).expanduser(), resolve_data_path(name_or_path)):
        if path.exists():
            return path.resolve()
    return None


def load_tokenizer(name_or_path: str | Path):
    """A local tokenizer directory (`local_tokenizer_dir`); anything else is passed to transformers as a hub id.
    Never reaches the hub for a local path."""
    from transformers import AutoTokenizer

    local = local_tokenizer_dir(name_or_path)
    if local is not None:
        return AutoTokenizer.from_pretrained(str(local), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(name_or_path))
