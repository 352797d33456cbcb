# Over 600 lines: exact hashing, MinHash-LSH and the cluster join are one streaming pass, kept together.
"""Exact and near-duplicate detection (MinHash LSH), streaming, with duplicate clusters.

Text of a row: its format's text fields (see `training_platform.data.text`), or the `fields` given.

- Exact duplicates: same normalised text (NFKC, case-folded, whitespace collapsed), compared by a 64-bit xxh3 hash.
- Near duplicates: MinHash over word n-gram shingles (`ngram` words, after lowercasing and removing punctuation).
  Signatures are datasketch's `affine32` MinHash: `signature(text)` equals
  `datasketch.MinHash(num_perm, seed, hashfunc=int).update_batch(shingle_hashes(text)).hashvalues` (same permutations,
  same MurmurHash3 pre-mix; `to_datasketch` wraps one as a LeanMinHash); here they are computed for a batch of rows
  at once with numpy. LSH splits a signature into `bands` bands of `rows`
  values; rows sharing any band are candidates. Candidates are verified on their signatures: a pair is a near
  duplicate when its estimated Jaccard similarity (fraction of equal signature values) is >= `threshold - margin`.
  `margin` defaults to three standard deviations of the estimator at the threshold, 3*sqrt(t*(1-t)/num_perm)
  (0.106 for t=0.8 and 128 permutations), so a pair whose true Jaccard equals the threshold is still found ~99.8% of
  the time while pairs 0.2 below it almost never are; `margin: 0` is a strict cut on the estimate (about half of the
  pairs exactly at the threshold are then missed). Bands/rows default to the largest `rows` whose collision
  probability at the threshold is >= 0.999.
- Clusters: connected components (union-find) of exact and verified near pairs. One row per cluster is kept: the
  first (`keep="first"`) or the one with the best heuristic quality score (`keep="best"`, ties -> first).

Memory stays bounded: rows are streamed in batches; only per-row hashes, band keys and signatures are kept, and
signatures and band keys live in temp files (memory-mapped), not in RAM; texts are never held beyond a batch.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from training_platform.data.text import normalize_for_exact, shingle_words

_M32 = np.uint64(0xFFFFFFFF)
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35), np.uint32(16))
_FMIX64 = (np.uint64(33), np.uint64(0xFF51AFD7ED558CCD), np.uint64(33), np.uint64(0xC4CEB9FE1A85EC53), np.uint64(33))


def _fmix(hv: np.ndarray, constants) -> np.ndarray:
    """MurmurHash3 finalizer (the pre-mix datasketch's affine schemes apply); wraps like the C version."""
    s1, m1, s2, m2, s3 = constants
    hv = hv ^ (hv >> s1)
    hv = hv * m1
    hv = hv ^ (hv >> s2)
    hv = hv * m2
    return hv ^ (hv >> s3)


def _word_hashes(words: list[str]) -> np.ndarray:
    import xxhash

    return np.fromiter(map(xxhash.xxh3_64_intdigest, map(str.encode, words)), dtype=np.uint64, count=len(words))


# ---------------------------------------------------------------------------------------------- MinHash


def affine32_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) permutation parameters of `datasketch.MinHash(num_perm, seed)` (affine32 scheme, datasketch 2.x),
    generated the same way; importing datasketch itself costs ~70 MB (it pulls in scipy). A test checks they equal
    `MinHash(num_perm, seed).permutations`."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def to_datasketch(signature: np.ndarray, seed: int = 1):
    """A `datasketch.LeanMinHash` holding this signature (for datasketch's MinHashLSH, jaccard, serialisation)."""
    from datasketch import LeanMinHash

    return LeanMinHash(seed=seed, hashvalues=np.asarray(signature, dtype=np.uint32), scheme="affine32")


class MinHasher:
    """Batch MinHash signatures identical to datasketch's `MinHash(num_perm, seed)` (affine32 scheme)."""

    def __init__(self, num_perm: int = 128, ngram: int = 5, seed: int = 1):
        if num_perm < 2 or ngram < 1:
            raise ValueError("num_perm must be >= 2 and ngram >= 1")
        self.num_perm, self.ngram, self.seed = num_perm, ngram, seed
        self.a, self.b = affine32_permutations(num_perm, seed)
        # Position weights that combine n word hashes into one n-gram hash (odd, fixed: signatures are stable
        # across runs and processes).
        rng = np.random.default_rng(0x5EED_D0D0)
        self._weights = rng.integers(1, 2**63, size=ngram, dtype=np.uint64) * np.uint64(2) + np.uint64(1)

    # -- shingles

    def _ngram_hashes(self, word_hashes: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """32-bit n-gram hashes of several docs whose word hashes are concatenated; returns (hashes, per-doc count).
        A doc with fewer than `ngram` (but at least one) words gets one shingle: all its words."""
        n = self.ngram
        total = len(word_hashes)
        counts = np.where(lengths >= n, lengths - n + 1, (lengths > 0).astype(np.int64)).astype(np.int64)
        if total == 0:
            return np.zeros(0, dtype=np.uint32), counts
        with np.errstate(over="ignore"):
            if total >= n:
                windows = word_hashes[: total - n + 1] * self._weights[0]
                for i in range(1, n):
                    windows += word_hashes[i : total - n + 1 + i] * self._weights[i]
            else:
                windows = np.zeros(0, dtype=np.uint64)
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
            long_docs = lengths >= n
            if long_docs.all():
                # The first (len - n + 1) windows of each doc lie inside it.
                grams = windows[_ranges(starts, counts)]
            else:
                offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
                grams = np.empty(int(counts.sum()), dtype=np.uint64)
                grams[_ranges(offsets[long_docs], counts[long_docs])] = windows[
                    _ranges(starts[long_docs], counts[long_docs])
                ]
                for doc in np.flatnonzero(~long_docs & (lengths > 0)).tolist():
                    start, length = int(starts[doc]), int(lengths[doc])
                    grams[offsets[doc]] = (word_hashes[start : start + length] * self._weights[:length]).sum(
                        dtype=np.uint64
                    )
        return ((grams ^ (grams >> np.uint64(32))) & _M32).astype(np.uint32), counts

    def shingle_hashes(self, text: str) -> np.ndarray:
        """The (32-bit) shingle hashes of one text; the set whose Jaccard similarity MinHash estimates."""
        words = shingle_words(text)
        hashes, _ = self._ngram_hashes(_word_hashes(words), np.array([len(words)], dtype=np.int64))
        return hashes

    # -- signatures

    def signatures_from_shingles(self, shingles: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(docs, num_perm) uint32 signatures; a doc without shingles gets the all-max signature."""
        docs = len(counts)
        out = np.full((docs, self.num_perm), np.uint32(0xFFFFFFFF), dtype=np.uint32)
        nonempty = counts > 0
        if not nonempty.any():
            return out
        hv = _fmix(shingles, _FMIX32)
        starts = np.concatenate(([0], np.cumsum(counts[nonempty])[:-1])).astype(np.int64)
        rows = np.empty((int(nonempty.sum()), self.num_perm), dtype=np.uint32)
        block = 8  # permutations per step: a (block x shingles) buffer, reused (fresh temporaries are slow)
        buf = np.empty((min(block, self.num_perm), len(hv)), dtype=np.uint32)
        with np.errstate(over="ignore"):
            for p in range(0, self.num_perm, block):
                k = min(block, self.num_perm - p)
                # permutations along rows, so the per-doc min runs over contiguous memory
                np.multiply(self.a[p : p + k, None], hv[None, :], out=buf[:k])
                np.add(buf[:k], self.b[p : p + k, None], out=buf[:k])
                rows[:, p : p + k] = np.minimum.reduceat(buf[:k], starts, axis=1).T
        out[nonempty] = rows
        return out

    def signatures(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(signatures, shingle counts) of a batch of texts."""
        words = [shingle_words(t) for t in texts]
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        flat = [w for ws in words for w in ws]
        shingles, counts = self._ngram_hashes(_word_hashes(flat), lengths)
        return self.signatures_from_shingles(shingles, counts), counts

    def signature(self, text: str) -> np.ndarray:
        return self.signatures([text])[0][0]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + c) for each (s, c), vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(total, dtype=np.int64) + offsets


def jaccard(a: Iterable[int], b: Iterable[int]) -> float:
    sa, sb = set(np.asarray(list(a)).tolist()), set(np.asarray(list(b)).tolist())
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def collision_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that two rows with this Jaccard similarity share at least one LSH band."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def default_margin(threshold: float, num_perm: int) -> float:
    """Three standard deviations of the MinHash Jaccard estimator at the threshold."""
    return 3.0 * math.sqrt(threshold * (1.0 - threshold) / num_perm)


def lsh_params(threshold: float, num_perm: int, *, min_collision: float = 0.999) -> tuple[int, int]:
    """(bands, rows): the largest `rows` (fewest chance candidates) with bands = num_perm // rows whose collision
    probability at `threshold` is >= min_collision."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if bands < 1:
            break
        if collision_probability(threshold, bands, rows) >= min_collision:
            best = (bands, rows)
    return best


# ---------------------------------------------------------------------------------------------- union-find


class UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = int(parent[root])
        while parent[x] != root:  # path compression
            parent[x], x = root, int(parent[x])
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if ra < rb:
            self.parent[rb] = ra
        else:
            self.parent[ra] = rb
        return True

    def roots(self) -> np.ndarray:
        """Root of every element (vectorised pointer jumping)."""
        parent = self.parent.copy()
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                return parent
            parent = grand


# ---------------------------------------------------------------------------------------------- dedup


@dataclass
class DedupConfig:
    """Dedup parameters. The `Field` bounds are what the platform accepts (the dataset operation's params are built
    from these fields: data/operations/dedup.py); `resolved()` checks what the algorithm itself needs."""

    threshold: Annotated[float, Field(gt=0, le=1)] = 0.8
    num_perm: Annotated[int, Field(ge=2, le=1024)] = 128
    ngram: Annotated[int, Field(ge=1, le=64)] = 5
    bands: Annotated[int | None, Field(ge=1, le=1024)] = None
    rows: Annotated[int | None, Field(ge=1, le=1024)] = None
    # None: 3 standard deviations of the estimator at the threshold
    margin: Annotated[float | None, Field(ge=0, lt=1)] = None
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 1
    exact: bool = True
    near: bool = True
    keep: Literal["first", "best"] = "first"
    batch_size: int = 512

    def resolved(self) -> dict[str, Any]:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"--threshold: must be in (0, 1], got {self.threshold}")
        if self.num_perm < 2:
            raise ValueError(f"--num-perm: must be >= 2, got {self.num_perm}")
        if self.ngram < 1:
            raise ValueError(f"--ngram: must be >= 1, got {self.ngram}")
        if self.keep not in ("first", "best"):
            raise ValueError(f"--keep: must be first or best, got {self.keep!r}")
        if (self.bands is None) != (self.rows is None):
            raise ValueError("--bands and --rows go together")
        bands, rows = self.bands, self.rows
        if bands is not None and rows is not None:  # both or neither (checked above)
            if bands < 1 or rows < 1 or bands * rows > self.num_perm:
                raise ValueError(f"--bands x --rows must be <= --num-perm ({self.num_perm})")
        else:
            bands, rows = lsh_params(self.threshold, self.num_perm)
        margin = default_margin(self.threshold, self.num_perm) if self.margin is None else self.margin
        return {
            **asdict(self),
            "bands": bands,
            "rows": rows,
            "margin": round(margin, 4),
            "verify_threshold": round(max(0.0, self.threshold - margin), 4),
            "collision_probability_at_threshold": round(collision_probability(self.threshold, bands, rows), 4),
        }


@dataclass
class DedupResult:
    n_rows: int
    clusters: list[list[int]]  # sorted members, clusters sorted by first member
    representatives: list[int]
    kinds: list[str]  # exact | near | mixed, per cluster
    keep: np.ndarray  # bool per row
    exact_duplicates: int
    near_duplicates: int
    params: dict[str, Any]
    candidate_pairs: int = 0
    verified_pairs: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def removed(self) -> int:
        return int(self.n_rows - self.keep.sum())

    def report(self) -> dict[str, Any]:
        details = [
            {"size": len(m), "representative": r, "members": m, "kind": k}
            for m, r, k in zip(self.clusters, self.representatives, self.kinds, strict=True)
        ]
        return {
            "input_rows": self.n_rows,
            "output_rows": int(self.keep.sum()),
            "exact_duplicates": self.exact_duplicates,
            "near_duplicates": self.near_duplicates,
            "duplicate_rate": round(self.removed / self.n_rows, 6) if self.n_rows else 0.0,
            "clusters": self.clusters,
            "cluster_details": details,
            "params": self.params,
            "candidate_pairs": self.candidate_pairs,
            "verified_pairs": self.verified_pairs,
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
        }


class _Spill:
    """Append-only uint array on disk, memory-mapped for reading."""

    def __init__(self, directory: Path, name: str, dtype, width: int):
        self.path = directory / name
        self.dtype, self.width, self.rows = np.dtype(dtype), width, 0
        self._f = self.path.open("wb")

    def append(self, block: np.ndarray) -> None:
        self._f.write(np.ascontiguousarray(block, dtype=self.dtype).tobytes())
        self.rows += len(block)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def array(self) -> np.ndarray:
        self.close()
        if self.rows == 0:
            return np.zeros((0, self.width), dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.rows, self.width))

    def read_rows(self, f, rows: np.ndarray) -> np.ndarray:
        """Rows `rows` (sorted) read with plain file reads, runs of consecutive rows in one read."""
        out = np.empty((len(rows), self.width), dtype=self.dtype)
        row_bytes = self.width * self.dtype.itemsize
        if not len(rows):
            return out
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [len(rows)]))
        view = out.view(np.uint8).reshape(len(rows), row_bytes)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            f.seek(int(rows[s]) * row_bytes)
            f.readinto(view[s:e].data.cast("B"))
        return out


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def find_duplicates(
    texts: Iterable[str],
    config: DedupConfig | None = None,
    *,
    quality: Callable[[str], float] | None = None,
    workdir: str | Path | None = None,
) -> DedupResult:
    """Exact + near-duplicate clusters over a stream of texts (one per row, in order). See the module docstring."""
    import xxhash

    config = config or DedupConfig()
    params = config.resolved()
    bands, rows_per_band, verify = params["bands"], params["rows"], params["verify_threshold"]
    if config.keep == "best" and quality is None:
        from training_platform.data.quality import heuristic_quality

        quality = heuristic_quality
    hasher = MinHasher(config.num_perm, config.ngram, config.seed) if config.near else None
    timings: dict[str, float] = {"signatures": 0.0}
    t0 = time.perf_counter()
    exact_hashes: list[np.ndarray] = []
    has_shingles: list[np.ndarray] = []
    qualities: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="tp-dedup-", dir=workdir) as tmp:
        sig_spill = _Spill(Path(tmp), "signatures.bin", np.uint32, config.num_perm) if config.near else None
        key_spills = [_Spill(Path(tmp), f"band{j}.bin", np.uint64, 1) for j in range(bands)] if config.near else []
        n = 0
        for batch in _batches(texts, config.batch_size):
            n += len(batch)
            exact_hashes.append(
                np.fromiter(
                    (xxhash.xxh3_64_intdigest(normalize_for_exact(t).encode()) for t in batch),
                    dtype=np.uint64,
                    count=len(batch),
                )
            )
            if quality is not None:
                qualities.append(np.fromiter(map(quality, batch), dtype=np.float32, count=len(batch)))
            if hasher is not None:
                assert sig_spill is not None  # both exist exactly when config.near
                ts = time.perf_counter()
                sigs, counts = hasher.signatures(batch)
                sig_spill.append(sigs)
                has_shingles.append(counts > 0)
                keys = band_keys(sigs, bands, rows_per_band)
                for j in range(bands):
                    key_spills[j].append(keys[:, j])
                timings["signatures"] += time.perf_counter() - ts
        timings["read_and_hash"] = time.perf_counter() - t0
        exact = np.concatenate(exact_hashes) if exact_hashes else np.zeros(0, dtype=np.uint64)
        uf = UnionFind(n)

        # exact duplicates: every row points at the first row with the same normalised text
        t1 = time.perf_counter()
        distinct = n
        leaders = np.ones(n, dtype=bool)
        if n:
            order = np.argsort(exact, kind="stable")
            sorted_hashes = exact[order]
            new_run = np.concatenate(([True], sorted_hashes[1:] != sorted_hashes[:-1]))
            run_id = np.cumsum(new_run) - 1
            leader_of_run = order[new_run]
            distinct = len(leader_of_run)
            if config.exact:
                uf.parent[order] = leader_of_run[run_id]
                leaders[order[~new_run]] = False
        timings["exact"] = time.perf_counter() - t1

        candidates = verified = 0
        if hasher is not None and n:
            assert sig_spill is not None  # both exist exactly when config.near
            t2 = time.perf_counter()
            sig_spill.close()
            active = np.flatnonzero(leaders & np.concatenate(has_shingles))
            codes = np.zeros(0, dtype=np.uint64)  # candidate pairs lo * n + hi, deduplicated band by band
            for j in range(bands):
                keys = np.asarray(key_spills[j].array()[:, 0])[active]
                order = np.argsort(keys, kind="stable")
                ks = keys[order]
                same = ks[1:] == ks[:-1]
                if not same.any():
                    continue
                pos = np.arange(1, len(ks))
                run_start = np.maximum.accumulate(np.where(np.concatenate(([False], same)), 0, np.arange(len(ks))))
                members = active[order]
                star = (members[run_start[pos[same]]], members[pos[same]])  # each member with its run's first
                chain = (members[pos[same] - 1], members[pos[same]])  # and with its predecessor
                a, b = np.concatenate((star[0], chain[0])), np.concatenate((star[1], chain[1]))
                lo, hi = np.minimum(a, b), np.maximum(a, b)
                keep_pair = lo != hi
                codes = np.union1d(
                    codes, lo[keep_pair].astype(np.uint64) * np.uint64(n) + hi[keep_pair].astype(np.uint64)
                )
            candidates = len(codes)
            timings["lsh"] = time.perf_counter() - t2
            t3 = time.perf_counter()
            with sig_spill.path.open("rb") as sig_file:
                for chunk in range(0, len(codes), 4096):
                    part = codes[chunk : chunk + 4096]
                    a = (part // np.uint64(n)).astype(np.int64)
                    b = (part % np.uint64(n)).astype(np.int64)
                    # only the signatures of this chunk's rows are read (not memory-mapped: bounded RSS)
                    rows_needed = np.unique(np.concatenate((a, b)))
                    sigs = sig_spill.read_rows(sig_file, rows_needed)
                    est = (sigs[np.searchsorted(rows_needed, a)] == sigs[np.searchsorted(rows_needed, b)]).mean(axis=1)
                    ok = est >= verify - 1e-9
                    verified += int(ok.sum())
                    for x, y in zip(a[ok].tolist(), b[ok].tolist(), strict=True):
                        uf.union(x, y)
            timings["verify"] = time.perf_counter() - t3

        for spill in (sig_spill, *key_spills):
            if spill is not None:
                spill.close()
    return cluster_result(
        uf,
        exact,
        np.concatenate(qualities) if qualities else None,
        config,
        params,
        distinct,
        candidates,
        verified,
        timings,
        t0,
    )


def band_keys(signatures: np.ndarray, bands: int, rows_per_band: int) -> np.ndarray:
    """(docs, bands) uint64 LSH keys: each band's `rows_per_band` signature values combined into one hash."""
    weights = np.random.default_rng(0xBA2D).integers(1, 2**63, size=bands * rows_per_band, dtype=np.uint64)
    starts = np.arange(0, bands * rows_per_band, rows_per_band)
    with np.errstate(over="ignore"):
        keys = np.add.reduceat(signatures[:, : bands * rows_per_band].astype(np.uint64) * weights, starts, axis=1)
    return _fmix(keys, _FMIX64)


def cluster_result(
    uf: UnionFind,
    exact: np.ndarray,
    q: np.ndarray | None,
    config: DedupConfig,
    params: dict[str, Any],
    distinct: int,
    candidates: int,
    verified: int,
    timings: dict[str, float],
    t0: float,
) -> DedupResult:
    """The clusters (connected components of the union-find over exact and verified near pairs), the row kept per
    cluster and the counts: the end of a dedup, wherever its pairs were found (here, or on Ray)."""
    n = len(exact)
    t4 = time.perf_counter()
    roots = uf.roots() if n else np.zeros(0, dtype=np.int64)
    order = np.argsort(roots, kind="stable")
    sorted_roots = roots[order]
    starts: np.ndarray | list[int] = (
        np.flatnonzero(np.concatenate(([True], sorted_roots[1:] != sorted_roots[:-1]))) if n else []
    )
    ends: np.ndarray | list[int] = np.concatenate((starts[1:], [n])) if n else []
    keep = np.ones(n, dtype=bool)
    clusters, reps, kinds = [], [], []
    for s, e in zip(np.asarray(starts).tolist(), np.asarray(ends).tolist(), strict=True):
        if e - s < 2:
            continue
        members = order[s:e]  # ascending row indices (stable sort)
        best = config.keep == "best" and q is not None
        rep = int(members[int(np.argmax(q[members]))]) if best else int(members[0])  # type: ignore[index]
        keep[members] = False
        keep[rep] = True
        n_exact = len(np.unique(exact[members]))
        kinds.append("exact" if n_exact == 1 else ("near" if n_exact == len(members) else "mixed"))
        clusters.append(members.tolist())
        reps.append(rep)
    by_first = sorted(range(len(clusters)), key=lambda i: clusters[i][0])
    clusters = [clusters[i] for i in by_first]
    reps = [reps[i] for i in by_first]
    kinds = [kinds[i] for i in by_first]
    timings["clusters"] = time.perf_counter() - t4
    removed = int(n - keep.sum())
    exact_dups = (n - distinct) if config.exact else 0
    timings["total"] = time.perf_counter() - t0
    return DedupResult(
        n_rows=n,
        clusters=clusters,
        representatives=reps,
        kinds=kinds,
        keep=keep,
        exact_duplicates=exact_dups,
        near_duplicates=removed - exact_dups,
        params=params,
        candidate_pairs=candidates,
        verified_pairs=verified,
        timings=timings,
    )


def _row_texts(path: str | Path, fmt: str | None, fields: list[str] | None, info: dict) -> Iterator[str]:
    """Texts of the file's rows; records each row's shape in info["shapes"] (for the output's schema)."""
    from training_platform.data.formats import DatasetError, detect_format
    from training_platform.data.io import iter_records
    from training_platform.data.text import row_text

    tracker, shapes = info["tracker"], info["shapes"]
    for record in iter_records(path):
        if record.error is not None:
            raise DatasetError([record.error])
        row = record.row
        if fmt is None and isinstance(row, dict):
            fmt = detect_format(row) or "unknown"
            info["format"] = fmt
        shapes.append(tracker.add(row))
        yield row_text(row, None if fmt == "unknown" else fmt, fields)


def local_duplicates(
    path: str | Path,
    config: DedupConfig,
    *,
    fmt: str | None = None,
    fields: list[str] | None = None,
    workdir: str | Path | None = None,
) -> tuple[DedupResult, dict[str, Any]]:
    """The clusters of a file's rows found in this process (one streaming pass), and the scan's format and row
    shapes."""
    from training_platform.data.versions import SchemaTracker

    info: dict[str, Any] = {"format": fmt, "tracker": SchemaTracker(), "shapes": []}
    return find_duplicates(_row_texts(path, fmt, fields, info), config, workdir=workdir), info


def dedup_file(
    path: str | Path,
    output: str | Path,
    config: DedupConfig | None = None,
    *,
    report_path: str | Path | None = None,
    fmt: str | None = None,
    fields: list[str] | None = None,
    workdir: str | Path | None = None,
    executor: Any = None,  # a data.executors.Executor (not imported: executors import this module)
) -> dict[str, Any]:
    """Deduplicate a file into `output` (atomic; kept rows in input order, byte-identical lines for JSONL ->
    JSONL). Returns the report (`input_rows`, `output_rows`, `exact_duplicates`, `near_duplicates`, `clusters`
    as lists of 0-based input row indices, `cluster_details`, params, timings, executor). The clusters are found
    by `executor` (default: local, in this process); the output is written here."""
    import hashlib

    from training_platform.core.files import sha256_file, write_json
    from training_platform.data.io import RowWriter, atomic_output, iter_records
    from training_platform.data.versions import DatasetVersion

    config = config or DedupConfig()
    if executor is None:
        result, info = local_duplicates(path, config, fmt=fmt, fields=fields, workdir=workdir)
    else:
        result, info = executor.duplicates(
            Path(path), config, fmt=fmt, fields=fields, workdir=Path(workdir) if workdir else None
        )
    t = time.perf_counter()
    keep = result.keep
    src, dst = Path(path), Path(output)
    if src.suffix.lower() in (".jsonl", ".ndjson") and dst.suffix.lower() == ".jsonl":
        digest = hashlib.sha256()
        with atomic_output(dst) as temp, src.open("rb") as fin, temp.open("wb") as fout:
            index = 0
            for line in fin:
                if not line.strip():
                    continue
                if keep[index]:
                    line = line if line.endswith(b"\n") else line + b"\n"
                    fout.write(line)
                    digest.update(line)
                index += 1
        output_sha = digest.hexdigest()
    else:
        with RowWriter(dst) as writer:
            for record in iter_records(src):
                if keep[record.index]:
                    writer.write(record.row)
        output_sha = sha256_file(dst)
    result.timings["write"] = time.perf_counter() - t
    shapes = np.asarray(info["shapes"], dtype=np.int64)
    kept_shapes: np.ndarray | list[int] = (
        np.bincount(shapes[keep], minlength=len(info["tracker"].signatures)) if len(shapes) else []
    )
    fmt_out = info["format"] if info["format"] != "unknown" else None
    version = DatasetVersion(
        sha256=output_sha,
        path=str(dst),
        rows=int(keep.sum()),
        format=fmt_out,
        schema=info["tracker"].schema({i: int(c) for i, c in enumerate(kept_shapes) if c}),
        parent_sha256=sha256_file(src),
        operation="dedup",
        params={**result.params, "fields": fields},
        size_bytes=dst.stat().st_size,
    ).to_dict()
    input_sha = version["parent_sha256"]
    report = {
        "input": str(path),
        "output": str(output),
        "format": info["format"],
        "fields": fields,
        **result.report(),
        "executor": executor.describe() if executor else {"name": "local", "workers": 1},
        "input_sha256": input_sha,
        "output_sha256": output_sha,
        "version": version,
    }
    if report_path is not None:
        write_json(report_path, report)
    return report
