"""Input caps against a real API process (uvicorn) and a real data worker, with the API's memory measured
(docs/limits.md): a JSON body over TP_MAX_BODY_MB -> 413 before parsing; an upload over TP_MAX_UPLOAD_MB -> 413 and
no file left; a 300 MB one-line upload is staged with the API's RSS flat and refused by the worker (TP_MAX_ROW_MB);
a Parquet bomb (80 KB, 3M rows) is refused by the worker (TP_MAX_DATASET_ROWS), the API untouched.

Big bodies are generated on the fly, 1 MB at a time: neither the test nor the API ever holds one."""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ds_helpers import REDIS_URL, staged_files, start_worker, wait_job

pytestmark = pytest.mark.integration

MB = 1024 * 1024
RSS_BOUND = 100 * MB  # the API may grow by at most this much while it receives any of these bodies
UPLOAD_CAP_MB = 320
BODY_CAP_MB = 8
BOUNDARY = "tpcapsboundary"


@dataclass
class Served:
    api: object  # the in-process client (tokens, helpers); requests below go to the real process
    port: int
    pid: int
    token: str
    data_dir: Path


@pytest.fixture(scope="module")
def served(data_dir, redis_client, tmp_path_factory) -> Iterator[Served]:
    import httpx
    from _wk import Proc, wait_for
    from api_helpers import database, running_api

    env = {
        "REDIS_URL": REDIS_URL,
        "TP_MAX_UPLOAD_MB": str(UPLOAD_CAP_MB),
        "TP_MAX_BODY_MB": str(BODY_CAP_MB),
        "TP_HEARTBEAT_INTERVAL": "1",
        "TP_MIN_FREE_DISK_MB": "1",
    }
    with database("sqlite", tmp_path_factory.mktemp("caps_db")) as url, running_api(data_dir, url, **env) as api:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = Proc(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "training_platform.api.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-access-log",
            ],
            {**os.environ},
            data_dir / "uvicorn.log",
        )

        def healthy():
            assert proc.popen.poll() is None, proc.log()[-3000:]
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        worker = None
        try:
            wait_for(healthy, 60, interval=0.3, what="uvicorn to answer /health")
            worker = start_worker(data_dir, "caps", queues="data")
            yield Served(api, port, proc.pid, api.tokens["alice"], data_dir)
        finally:
            if worker is not None:
                worker.stop()
            proc.stop()


class RssPeak:
    """The highest RSS of a process while the block runs (sampled every 20 ms), and its RSS before."""

    def __init__(self, pid: int):
        import psutil

        self.process = psutil.Process(pid)
        self.before = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.before

    def report(self, what: str) -> str:
        line = (
            f"API RSS {what}: before {self.before / MB:.0f} MB, peak {self.peak / MB:.0f} MB "
            f"(+{self.growth / MB:.1f} MB)"
        )
        print(line)
        return line


def _chunks(total: int, byte: bytes = b"a") -> Iterator[bytes]:
    block = byte * MB
    sent = 0
    while sent < total:
        n = min(MB, total - sent)
        yield block if n == MB else block[:n]
        sent += n


def _multipart(name: str, filename: str, payload: Iterator[bytes]) -> Iterator[bytes]:
    yield (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    yield from payload
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


def _multipart_length(name: str, filename: str, payload_len: int) -> int:
    return sum(len(part) for part in _multipart(name, filename, iter(()))) + payload_len


def _post(
    served: Served, path: str, body, headers: dict[str, str], *, chunked: bool = False, timeout: float = 120
) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=timeout)
    try:
        conn.request(
            "POST",
            f"/api/v1{path}",
            body=body,
            encode_chunked=chunked,
            headers={"Authorization": f"Bearer {served.token}", **headers},
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def _warm_up(served: Served) -> None:
    """Import what the routes import lazily, so the first measurement does not count it as growth."""
    status, _ = _post(served, "/jobs", b"{}", {"Content-Type": "application/json"})
    assert status == 422
    payload = b'{"text": "warm up"}\n'
    status, body = _post(
        served,
        "/datasets",
        b"".join(_multipart("warm", "w.jsonl", iter([payload]))),
        {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
    )
    assert status == 202, body
    assert wait_job(served.api, body["job"]["id"], timeout=60)["status"] == "succeeded"


def test_json_bodies_over_the_cap_get_413_before_parsing(served):
    _warm_up(served)
    size = 150 * MB  # what the API used to parse whole (417 MB RSS)

    head, tail = b'{"name": "huge", "config": {"pad": "', b'"}}'

    def big_json() -> Iterator[bytes]:
        yield head
        yield from _chunks(size)
        yield tail

    with RssPeak(served.pid) as rss:
        status, body = _post(
            served,
            "/jobs",
            big_json(),
            {"Content-Type": "application/json", "Content-Length": str(len(head) + size + len(tail))},
        )
    rss.report("during a 150 MB JSON body (Content-Length)")
    assert status == 413, body
    assert "TP_MAX_BODY_MB" in body["detail"] and f"{BODY_CAP_MB} MB" in body["detail"]
    assert rss.growth < RSS_BOUND

    # No Content-Length (chunked): counted while it streams, refused once over the cap.
    with RssPeak(served.pid) as rss:
        status, body = _post(served, "/jobs", big_json(), {"Content-Type": "application/json"}, chunked=True)
    rss.report("during a 150 MB chunked JSON body")
    assert status == 413 and "TP_MAX_BODY_MB" in body["detail"], body
    assert rss.growth < RSS_BOUND

    # Under the cap, bodies are parsed as usual (here: a 422 naming the problem, not a 413).
    status, body = _post(
        served,
        "/jobs",
        json.dumps({"name": "small", "config": {"pad": "x" * 100_000}}),
        {"Content-Type": "application/json"},
    )
    assert status == 422, body


def test_upload_over_the_cap_gets_413_and_leaves_no_file(served):
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    # Declared too large: refused before a byte is sent (the client asked 100-continue).
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(
            (
                f"POST /api/v1/datasets HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {served.token}"
                f"\r\nContent-Type: {headers['Content-Type']}\r\nContent-Length: {400 * MB}\r\n"
                f"Expect: 100-continue\r\n\r\n"
            ).encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        answer = answer.decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413"), answer
    assert "TP_MAX_UPLOAD_MB" in answer

    # Chunked, no length: streamed to disk until the cap, then 413 and the partial file removed.
    before = staged_files(served.data_dir)
    with RssPeak(served.pid) as rss:
        too_big = _multipart("too-big", "big.jsonl", _chunks((UPLOAD_CAP_MB + 10) * MB))
        status, body = _post(served, "/datasets", too_big, headers, chunked=True)
    rss.report(f"during a {UPLOAD_CAP_MB + 10} MB chunked upload (refused)")
    assert status == 413, body
    assert f"{UPLOAD_CAP_MB} MB (TP_MAX_UPLOAD_MB)" in body["detail"]
    assert not set(staged_files(served.data_dir)) - set(before)  # the partial file is gone
    assert not any(p.is_file() for p in (served.data_dir / "datasets" / "tmp").glob("*"))
    assert rss.growth < RSS_BOUND
    assert served.api.get("/datasets", params={"q": "too-big"}).json()["total"] == 0


def test_a_300_mb_one_line_upload_keeps_the_api_flat_and_the_worker_refuses_it(served):
    size = 300 * MB
    payload = iter([b'{"text": "', *_chunks(size - 12), b'"}'])  # one line, no newline: 300 MB
    headers = {
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        "Content-Length": str(_multipart_length("one-line", "line.jsonl", size)),
    }
    started = time.monotonic()
    with RssPeak(served.pid) as rss:
        status, body = _post(served, "/datasets", _multipart("one-line", "line.jsonl", payload), headers)
    rss.report(f"during a 300 MB one-line upload ({time.monotonic() - started:.1f}s)")
    assert status == 202, body
    assert body["staged_bytes"] == size
    assert rss.growth < RSS_BOUND

    job = wait_job(served.api, body["job"]["id"], timeout=120)
    assert job["status"] == "failed", job
    assert "line 1 is longer than the limit of 8 MB per row" in job["error"] and "TP_MAX_ROW_MB" in job["error"]
    assert job["config"]["result"]["detail"][0]["loc"] == "<file>"
    assert served.api.get(f"/datasets/{body['dataset']['id']}").status_code == 404  # created for it, removed
    assert staged_files(served.data_dir) == []


def test_a_parquet_bomb_is_refused_by_the_worker(served, tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 3_000_000  # 80 KB on disk
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["What is 1+1? " * 8]))
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"prompt": text, "completion": text}), bomb, compression="zstd")
    content = bomb.read_bytes()
    assert len(content) < 200_000

    started = time.monotonic()
    with RssPeak(served.pid) as rss:
        status, body = _post(
            served,
            "/datasets",
            b"".join(_multipart("bomb", "bomb.parquet", iter([content]))),
            {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
        )
    elapsed = time.monotonic() - started
    rss.report(f"during the Parquet bomb upload ({elapsed:.2f}s)")
    assert status == 202, body
    assert elapsed < 10 and rss.growth < 20 * MB  # the API only stored the bytes

    job = wait_job(served.api, body["job"]["id"], timeout=60)
    assert job["status"] == "failed", job
    assert "3000000 rows, over the limit of 2000000 rows per dataset file (TP_MAX_DATASET_ROWS)" in job["error"]
    assert served.api.get("/datasets", params={"q": "bomb"}).json()["total"] == 0
    assert staged_files(served.data_dir) == []
