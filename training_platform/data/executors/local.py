"""The `local` executor: stages run in this process, over one streaming read of the file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training_platform.data.executors.base import DEFAULT_BLOCK_ROWS, BlockStage, Executor, blocks, register_executor
from training_platform.data.io import iter_records


@register_executor("local")
class LocalExecutor(Executor):
    def __init__(self, block_rows: int = DEFAULT_BLOCK_ROWS, **_: Any):
        self.workers = 1
        self.block_rows = block_rows

    def map_blocks(self, path: Path, stage: BlockStage) -> Iterator[Any]:
        for block in blocks(iter_records(path), self.block_rows):
            yield stage(block)

    def duplicates(self, path, config, *, fmt, fields, workdir):
        from training_platform.data.dedup import local_duplicates

        return local_duplicates(path, config, fmt=fmt, fields=fields, workdir=workdir)
