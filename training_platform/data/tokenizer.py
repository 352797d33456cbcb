"""Loading a tokenizer for the data factory (chat-template previews, token lengths, perplexity, token-based
filters): a module of its own, below the operations that use it, so none of them imports another to get one."""

from __future__ import annotations

from pathlib import Path


def load_tokenizer(name_or_path: str | Path):
    """A local tokenizer directory (as given, else relative to TP_DATA_DIR like job config paths); anything else
    is passed to transformers as a hub id. Never reaches the hub for a local path."""
    from transformers import AutoTokenizer

    from training_platform.core.paths import resolve_data_path

    for path in (Path(name_or_path).expanduser(), resolve_data_path(name_or_path)):
        if path.exists():
            return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(name_or_path))
