"""The `ray` executor: the data factory's stages as Ray Data pipelines on a Ray cluster.

- Reading: a Ray Data datasource (`_RangeSource`) with one read task per row range of the file (executors/base.py:
  JSONL byte ranges planned by one scan of the file, Parquet row groups); each task reads its range with the
  platform's own reader, so rows, indices and line numbers are those of a local read.
- Row work (`map_blocks`): a `map_batches` stage per block, fused with its read; results come back to the driver in
  file order (`preserve_order`), where the operation merges them exactly as it does locally. Memory per worker is
  one block (`DEFAULT_BLOCK_ROWS` rows, at most 64 MB of JSONL).
- Dedup (`duplicates`): signatures, exact hashes and LSH band keys per row in a map stage; exact duplicates by a
  sort-based shuffle on the exact hash; near duplicates by a sort-based shuffle on (band, key), after which one numpy
  pass per block (every bucket whole in one block, `_sorted_blocks`) emits the same candidate pairs the local pass
  does (each member with its bucket's first and with its predecessor); distinct pairs by a shuffle. The driver
  gathers the signatures of the rows in a candidate pair (a map stage picks them out of the materialised rows),
  verifies the pairs as the local pass does and joins the verified ones into clusters
  (connected components, `dedup.cluster_result`: the same code as the local dedup).

The cluster: `address` (else TP_RAY_ADDRESS). A driver that is already connected (`ray.is_initialized()`) is used as
it is; otherwise this executor connects for the operation and disconnects after.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training_platform.core.ray_client import ClusterUnavailable, joined, unreachable
from training_platform.data.executors.base import (
    DEFAULT_BLOCK_ROWS,
    BlockStage,
    Executor,
    ExecutorError,
    RowRange,
    plan_ranges,
    read_range,
    register_executor,
)
from training_platform.data.io import Record

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0


def check_reachable(address: str | None) -> str:
    """The address to join, or ExecutorError naming `executor` when there is none or its GCS does not answer."""
    if not address:
        raise ExecutorError("executor: ray needs a cluster: set TP_RAY_ADDRESS or pass --ray-address")
    if (problem := unreachable(address, CONNECT_TIMEOUT_S)) is not None:
        raise ExecutorError(f"executor: {problem}")
    return address


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Connected to the cluster for the duration (core/ray_client.py: unless this process already is), with Ray
    Data keeping order."""
    from ray.data import DataContext
    from ray.data.context import ShuffleStrategy

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(joined(address))
        except ClusterUnavailable as exc:
            raise ExecutorError(f"executor: {exc}") from None
        ctx = DataContext.get_current()
        saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.shuffle_strategy)
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        # Shuffles as plain tasks (sort-based): the actor-based hash shuffle stalled on a small (2-CPU) cluster.
        ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
        try:
            yield
        finally:
            ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.shuffle_strategy = saved


def _unwrap(exc: BaseException) -> BaseException:
    """The domain error a Ray task raised (DatasetError, RecipeError, ValueError), not Ray's wrappers around it
    (RayTaskError, Ray Data's UserCodeException), found through their causes."""
    queue, seen = [exc], set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if not type(current).__module__.startswith("ray") and not isinstance(current, StopIteration):
            return current
        for inner in (getattr(current, "cause", None), current.__cause__):
            if isinstance(inner, BaseException):
                queue.append(inner)
    return exc


def _records_table(records: Sequence[Record]):
    import pyarrow as pa

    return pa.table(
        {
            "index": pa.array([r.index for r in records], pa.int64()),
            "record": pa.array([pickle.dumps(r, protocol=5) for r in records], pa.binary()),
        }
    )


def _read_task(path: str, rng: RowRange, block_rows: int):
    block: list[Record] = []
    for record in read_range(path, rng):
        block.append(record)
        if len(block) >= block_rows:
            yield _records_table(block)
            block = []
    if block or rng.rows == 0:
        yield _records_table(block)


def _range_source(path: Path, ranges: list[RowRange], block_rows: int):
    from functools import partial

    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    size = path.stat().st_size

    class _RangeSource(Datasource):
        def estimate_inmemory_data_size(self) -> int:
            return size

        def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
            tasks = []
            for rng in ranges:
                meta = BlockMetadata(
                    num_rows=rng.rows if rng.rows >= 0 else None,
                    size_bytes=(rng.end - rng.start) or None,
                    input_files=(str(path),),
                    exec_stats=None,
                )
                tasks.append(ReadTask(partial(_read_task, str(path), rng, block_rows), meta))
            return tasks

    return _RangeSource()


def _records(batch) -> list[Record]:
    return [pickle.loads(b) for b in batch.column("record").to_pylist()]


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _apply_stage(batch, stage: BlockStage):
    """One block through the stage. A domain error (a bad row, a bad recipe) comes back as the block's result, as
    (class, args, attributes): Ray's own wrapper of a task's exception does not keep it."""
    import pyarrow as pa

    records = _records(batch)
    try:
        outcome: tuple = ("ok", stage(records))
    except Exception as exc:  # noqa: BLE001 - re-raised by the driver, as itself
        outcome = ("error", type(exc), exc.args, dict(vars(exc)))
    return pa.table(
        {
            "result": pa.array([pickle.dumps(outcome, protocol=5)], pa.binary()),
            "worker": pa.array([_worker_name()], pa.string()),
        }
    )


@register_executor("ray")
class RayExecutor(Executor):
    def __init__(
        self, address: str | None = None, workers: int | None = None, block_rows: int = DEFAULT_BLOCK_ROWS, **_: Any
    ):
        from training_platform.core.settings import get_settings

        self.block_rows = block_rows
        self.address = address or get_settings().ray_address
        self.requested_workers = workers
        self.workers = workers or 0
        self.blocks = 0

    def _dataset(self, path: Path):
        import ray

        ranges = plan_ranges(path, block_rows=self.block_rows)
        self.blocks = len(ranges)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = min(self.requested_workers or cpus, cpus) or 1
        return ray.data.read_datasource(
            _range_source(path, ranges, self.block_rows), override_num_blocks=len(ranges), concurrency=self.workers
        )

    def map_blocks(self, path: Path, stage: BlockStage) -> Iterator[Any]:
        with ray_session(self.address):
            ds = self._dataset(path).map_batches(
                _apply_stage, batch_size=None, batch_format="pyarrow", fn_kwargs={"stage": stage}
            )
            done, by_worker = 0, dict[str, int]()
            try:
                for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                    for blob, worker in zip(
                        batch.column("result").to_pylist(), batch.column("worker").to_pylist(), strict=True
                    ):
                        done += 1
                        by_worker[worker] = by_worker.get(worker, 0) + 1
                        self._progress("map", done, by_worker)
                        outcome = pickle.loads(blob)
                        if outcome[0] == "error":
                            error = BaseException.__new__(outcome[1])
                            error.args, _ = outcome[2], error.__dict__.update(outcome[3])
                            raise error
                        yield outcome[1]
            except Exception as exc:  # noqa: BLE001 - re-raised as the task's own error
                raise _unwrap(exc) from None

    def duplicates(self, path, config, *, fmt, fields, workdir):
        with ray_session(self.address):
            try:
                return self._duplicates(Path(path), config, fmt, fields)
            except Exception as exc:  # noqa: BLE001 - re-raised as the task's own error
                _raise_first_bad_row(Path(path))  # Ray's wrapper lost it: the row the local pass stops at
                raise _unwrap(exc) from None

    def _progress(self, stage: str, done: int, by_worker: dict[str, int]) -> None:
        if self.on_progress is not None:
            self.on_progress({"stage": stage, "done": done, "total": self.blocks, "workers": dict(by_worker)})

    def _partitions(self, rows: int) -> int:
        """Shuffle partitions: two per worker, more for big inputs (about 100k rows each, at most 256)."""
        return max(2 * self.workers, min(256, rows // 100_000))

    def _duplicates(self, path: Path, config, fmt: str | None, fields: list[str] | None):
        from training_platform.data.dedup import UnionFind, cluster_result
        from training_platform.data.versions import SchemaTracker

        params = config.resolved()
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        fmt = fmt or _first_format(path)
        rows = (
            self._dataset(path)
            .map_batches(
                _hash_rows,
                batch_size=None,
                batch_format="pyarrow",
                fn_kwargs={"config": config, "params": params, "fmt": fmt, "fields": fields},
            )
            .materialize()
        )
        # What the driver keeps per row, as the local pass does: exact hash, quality, shape.
        exact_parts, q_parts, shape_parts = [], [], []
        tracker = SchemaTracker()
        shape_ids: dict[bytes, int] = {}
        for batch in rows.select_columns(["exact", "q", "shape"]).iter_batches(batch_size=None, batch_format="pyarrow"):
            exact_parts.append(batch.column("exact").to_numpy())
            q_parts.append(batch.column("q").to_numpy())
            shapes = []
            for blob in batch.column("shape").to_pylist():
                sid = shape_ids.get(blob)
                if sid is None:
                    sid = shape_ids[blob] = tracker.add_signature(pickle.loads(blob))
                shapes.append(sid)
            shape_parts.append(np.asarray(shapes, dtype=np.int64))
        exact = np.concatenate(exact_parts) if exact_parts else np.zeros(0, dtype=np.uint64)
        n = len(exact)
        if n >= 2**31:  # candidate pairs travel packed as one uint64 (`_bucket_pairs`)
            raise ExecutorError(f"executor: ray dedups at most {2**31 - 1} rows at once; this input has {n}")
        timings["read_and_hash"] = time.perf_counter() - t0
        info = {"format": fmt, "tracker": tracker, "shapes": np.concatenate(shape_parts).tolist()}
        uf = UnionFind(n)

        # exact duplicates: a shuffle on the hash; every row of a group points at its first row
        t1 = time.perf_counter()
        dup_idx, dup_leader = _collect(
            _sorted_blocks(rows.select_columns(["idx", "exact"]), ["exact"]).map_batches(
                _exact_groups, batch_size=None, batch_format="numpy"
            ),
            ("idx", "leader"),
        )
        distinct = n - len(dup_idx)
        if config.exact and len(dup_idx):
            uf.parent[dup_idx] = dup_leader
        timings["exact"] = time.perf_counter() - t1

        candidates = verified = 0
        if config.near and n:
            t2 = time.perf_counter()
            inactive = np.sort(dup_idx) if config.exact else np.zeros(0, dtype=np.int64)
            buckets = rows.select_columns(["idx", "has", "keys"]).map_batches(
                _band_rows, batch_format="numpy", fn_kwargs={"inactive": inactive}
            )
            pairs = _sorted_blocks(buckets, ["band", "key"]).map_batches(
                _bucket_pairs, batch_size=None, batch_format="numpy"
            )
            # distinct candidate pairs: a shuffle on the pair; they come to the driver (a fraction of the rows)
            distinct_pairs = pairs.groupby("pair", num_partitions=self._partitions(n)).count()
            lo, hi = _split_pairs(_collect(distinct_pairs, ("pair",))[0])
            candidates = len(lo)
            timings["lsh"] = time.perf_counter() - t2
            if candidates:
                t3 = time.perf_counter()
                # the signatures of the rows in a candidate pair only, gathered in row order
                needed = np.unique(np.concatenate((lo, hi)))
                gathered = rows.select_columns(["idx", "sig"]).map_batches(
                    _signatures_of, batch_format="numpy", fn_kwargs={"needed": needed}
                )
                sigs = np.zeros((len(needed), config.num_perm), dtype=np.uint32)
                for batch in gathered.iter_batches(batch_size=None, batch_format="numpy"):
                    if len(batch["idx"]):
                        sigs[np.searchsorted(needed, batch["idx"])] = _matrix(batch["sig"])
                for start in range(0, candidates, 4096):
                    a, b = lo[start : start + 4096], hi[start : start + 4096]
                    same = sigs[np.searchsorted(needed, a)] == sigs[np.searchsorted(needed, b)]
                    ok = same.mean(axis=1) >= params["verify_threshold"] - 1e-9
                    verified += int(ok.sum())
                    for x, y in zip(a[ok].tolist(), b[ok].tolist(), strict=True):
                        uf.union(x, y)
                timings["verify"] = time.perf_counter() - t3
        q = np.concatenate(q_parts) if config.keep == "best" and q_parts else None
        result = cluster_result(uf, exact, q, config, params, distinct, candidates, verified, timings, t0)
        return result, info


def _raise_first_bad_row(path: Path) -> None:
    """A failed Ray stage over a file with a bad row: raise the local reader's error for its first one."""
    from training_platform.data.formats import DatasetError
    from training_platform.data.io import iter_records

    for record in iter_records(path):
        if record.error is not None:
            raise DatasetError([record.error]) from None


def _first_format(path: Path) -> str | None:
    """The format of the first row (as the local pass detects it), or None."""
    from training_platform.data.formats import detect_format
    from training_platform.data.io import iter_records

    for record in iter_records(path):
        if record.error is None and isinstance(record.row, dict):
            return detect_format(record.row) or "unknown"
    return None


def _collect(ds, columns: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for c in columns:
            parts[c].append(np.asarray(batch[c], dtype=np.int64))
    return tuple(np.concatenate(parts[c]) if parts[c] else np.zeros(0, dtype=np.int64) for c in columns)


def _sorted_blocks(ds, keys: list[str]):
    """`ds` shuffled so that all rows with equal `keys` sit in one block (blocks in key order).

    The sort's range partitioning sends equal keys to the same partition; Ray Data's own `map_groups` relies on it
    the same way (grouped_data.py: a sort, then a `map_batches` with `batch_size=None`). A stage run after it with
    `batch_size=None` then sees every group whole and can work on all of a block's groups at once, with numpy,
    instead of `map_groups`'s one Python call per group (about 25M calls for the LSH buckets of 1M rows)."""
    return ds.sort(keys)


# ---------------------------------------------------------------------------------------------- dedup stages


def _hash_rows(batch, config, params, fmt, fields):
    """Per row: index, exact hash, quality (keep: best), shingles or not, signature, band keys, shape."""
    import pyarrow as pa
    import xxhash

    from training_platform.data.dedup import MinHasher, band_keys
    from training_platform.data.formats import DatasetError
    from training_platform.data.text import normalize_for_exact, row_text
    from training_platform.data.versions import SchemaTracker

    records = _records(batch)
    texts, shapes = [], []
    for record in records:
        if record.error is not None:
            raise DatasetError([record.error])
        row = record.row
        texts.append(row_text(row, None if fmt in (None, "unknown") else fmt, fields))
        shapes.append(pickle.dumps(SchemaTracker.signature(row), protocol=5))
    n = len(texts)
    exact = np.fromiter(
        (xxhash.xxh3_64_intdigest(normalize_for_exact(t).encode()) for t in texts), dtype=np.uint64, count=n
    )
    if config.keep == "best":
        from training_platform.data.quality import heuristic_quality

        q = np.fromiter(map(heuristic_quality, texts), dtype=np.float32, count=n)
    else:
        q = np.zeros(n, dtype=np.float32)
    columns: dict[str, Any] = {
        "idx": pa.array([r.index for r in records], pa.int64()),
        "exact": pa.array(exact, pa.uint64()),
        "q": pa.array(q, pa.float32()),
        "shape": pa.array(shapes, pa.binary()),
    }
    if config.near:
        sigs, counts = MinHasher(config.num_perm, config.ngram, config.seed).signatures(texts)
        keys = band_keys(sigs, params["bands"], params["rows"])
        columns["has"] = pa.array(counts > 0, pa.bool_())
        columns["sig"] = pa.FixedSizeListArray.from_arrays(pa.array(sigs.reshape(-1), pa.uint32()), config.num_perm)
        columns["keys"] = pa.FixedSizeListArray.from_arrays(pa.array(keys.reshape(-1), pa.uint64()), params["bands"])
    return pa.table(columns)


def _group_starts(*columns: np.ndarray) -> np.ndarray:
    """For rows sorted by `columns`: True where a row starts a new group of equal values."""
    starts = np.ones(len(columns[0]), dtype=bool)
    if len(starts) > 1:
        starts[1:] = np.logical_or.reduce([c[1:] != c[:-1] for c in columns])
    return starts


def _exact_groups(block: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A block of whole exact-hash groups (`_sorted_blocks`): each group's rows after its first, each with that first
    row (the local pass's leader)."""
    idx = np.asarray(block["idx"], dtype=np.int64)
    exact = np.asarray(block["exact"], dtype=np.uint64)
    order = np.lexsort((idx, exact))
    idx, exact = idx[order], exact[order]
    if not len(idx):
        return {"idx": idx, "leader": idx.copy()}
    starts = _group_starts(exact)
    leader = idx[starts][np.cumsum(starts) - 1]
    return {"idx": idx[~starts], "leader": leader[~starts]}


def _band_rows(batch: dict[str, np.ndarray], inactive: np.ndarray) -> dict[str, np.ndarray]:
    """(band, key, idx) for every band of every row that takes part in near dedup: rows with shingles that are not
    an exact duplicate of an earlier row."""
    idx = np.asarray(batch["idx"], dtype=np.int64)
    keys = np.stack(list(batch["keys"])) if len(idx) else np.zeros((0, 0), dtype=np.uint64)
    active = np.asarray(batch["has"], dtype=bool) & ~np.isin(idx, inactive)
    idx, keys = idx[active], keys[active]
    bands = keys.shape[1] if keys.ndim == 2 else 0
    return {
        "band": np.tile(np.arange(bands, dtype=np.int32), len(idx)),
        "key": keys.reshape(-1).astype(np.uint64),
        "idx": np.repeat(idx, bands),
    }


def _bucket_pairs(block: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The candidate pairs of a block of whole LSH buckets (`_sorted_blocks` on band and key), as the local pass
    makes them: a bucket's members in row order, each paired with the bucket's first member and with its
    predecessor. Pairs come out as one uint64 `lo << 32 | hi` (lo < hi), distinct within the block."""
    band = np.asarray(block["band"], dtype=np.int64)
    key = np.asarray(block["key"], dtype=np.uint64)
    idx = np.asarray(block["idx"], dtype=np.int64)
    order = np.lexsort((idx, key, band))
    band, key, idx = band[order], key[order], idx[order]
    if len(idx) < 2:
        return {"pair": np.zeros(0, dtype=np.uint64)}
    starts = _group_starts(band, key)
    first = idx[starts][np.cumsum(starts) - 1]
    member = ~starts
    hi = idx[member]
    predecessor = idx[:-1][member[1:]]
    lo = np.concatenate((first[member], predecessor))
    hi = np.concatenate((hi, hi))
    keep = lo != hi
    return {"pair": np.unique((lo[keep].astype(np.uint64) << np.uint64(32)) | hi[keep].astype(np.uint64))}


def _split_pairs(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_bucket_pairs`'s packed pairs back to (lo, hi) row indices, sorted by (lo, hi)."""
    pairs = np.sort(pairs.astype(np.uint64))
    return (pairs >> np.uint64(32)).astype(np.int64), (pairs & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _matrix(column) -> np.ndarray:
    """A fixed-size list column as a (rows, width) array."""
    array = np.asarray(column)
    return array if array.ndim == 2 else np.stack(list(array))


def _signatures_of(batch: dict[str, np.ndarray], needed: np.ndarray) -> dict[str, np.ndarray]:
    """The (index, signature) of the batch's rows that are in `needed` (sorted row indices)."""
    idx = np.asarray(batch["idx"], dtype=np.int64)
    keep = np.isin(idx, needed)
    sigs = _matrix(batch["sig"]) if len(idx) else np.zeros((0, 0), dtype=np.uint32)
    return {"idx": idx[keep], "sig": sigs[keep]}
