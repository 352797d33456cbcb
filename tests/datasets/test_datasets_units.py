"""Pieces of the dataset platform that need no services: the streaming multipart parser, the read-progress probe of
data jobs, report compaction."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


class Collect:
    def __init__(self, boundary: bytes):
        from training_platform.api.multipart import MultipartStream

        class Parser(MultipartStream):
            def part_begin(inner, name, filename):  # noqa: N805
                self.parts.append([name, filename, b""])

            def part_data(inner, data):  # noqa: N805
                self.parts[-1][2] += data

            def part_end(inner):  # noqa: N805
                self.ended += 1

        self.parts: list[list] = []
        self.ended = 0
        self.parser = Parser(boundary)


def _body(boundary: str, payload: bytes) -> bytes:
    return (
        (
            f'preamble\r\n--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nmy-set\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a \\"b\\".jsonl"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\nepilogue".encode()
    )


@pytest.mark.parametrize("chunk", [1, 3, 17, 4096])
def test_multipart_stream_any_chunking(chunk):
    boundary = "XyZ"
    payload = b"line one\r\n--XyNot the boundary\r\n--X\r\nlast"  # boundary look-alikes inside the data
    collect = Collect(boundary.encode())
    body = _body(boundary, payload)
    for i in range(0, len(body), chunk):
        collect.parser.feed(body[i : i + chunk])
    collect.parser.close()
    assert collect.parts == [["name", None, b"my-set"], ["file", 'a "b".jsonl', payload]]
    assert collect.ended == 2


def test_multipart_stream_rejects_truncated_and_malformed_bodies():
    from training_platform.api.multipart import MultipartError, content_disposition

    collect = Collect(b"XyZ")
    collect.parser.feed(_body("XyZ", b"data")[:-20])
    with pytest.raises(MultipartError, match="ended before"):
        collect.parser.close()
    collect = Collect(b"XyZ")
    with pytest.raises(MultipartError, match="Content-Disposition"):
        collect.parser.feed(b"--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--")
    assert content_disposition("form-data; name=file; filename*=UTF-8''na%C3%AFve.jsonl") == {
        "name": "file",
        "filename": "na\u00efve.jsonl",
    }


def test_input_progress_reads_the_position_of_open_descriptors(tmp_path):
    from training_platform.workers.data_tasks import InputProgress

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"x" * 1000)
    probe = InputProgress(path, lambda fraction: None)
    assert probe.read() is None  # not open
    with path.open("rb") as f:
        f.seek(250)
        assert probe.read() == pytest.approx(0.25)
        f.seek(1000)
        assert probe.read() == pytest.approx(1.0)


def test_compact_cuts_long_lists_and_says_so():
    from training_platform.services.datasets import compact

    report = {"clusters": [[i, i + 1] for i in range(500)], "nested": {"rows": list(range(3))}, "n": 1}
    out = compact(report, max_items=10)
    assert len(out["clusters"]) == 10 and out["clusters_total"] == 500
    assert out["nested"] == {"rows": [0, 1, 2]} and out["n"] == 1


def test_read_limits_bound_every_format(tmp_path):
    """Rows, decoded bytes and bytes per row are capped while reading: a long line is never held whole, a Parquet
    file is refused from its metadata (rows) or while it decodes (dictionary-encoded bytes count decoded)."""
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from training_platform.data.formats import LimitExceeded, ReadLimits
    from training_platform.data.io import iter_records

    def refused(path, **limits) -> LimitExceeded:
        with pytest.raises(LimitExceeded) as info:
            for _ in iter_records(path, ReadLimits(**limits)):
                pass
        return info.value

    long_line = tmp_path / "long.jsonl"
    long_line.write_bytes(b'{"text": "ok"}\n{"text": "' + b"x" * 5000 + b'"}\n')
    err = refused(long_line, max_row_bytes=1000)
    assert (
        err.cap == "row_bytes"
        and str(err) == "line 2: <file>: line 2 is longer than the limit of 1000 bytes per row; it was not read"
    )
    assert refused(long_line, max_rows=1).cap == "rows"
    assert refused(long_line, max_bytes=100).cap == "bytes"

    csv_file = tmp_path / "rows.csv"
    csv_file.write_text("prompt,completion\nhi," + "y" * 3000 + "\n")
    assert refused(csv_file, max_row_bytes=1000).cap == "row_bytes"

    rows = [{"text": f"row {i} " + "z" * (i % 7)} for i in range(3000)] + [{"n": 12345678901234}]
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(rows, indent=1))
    assert [r.row for r in iter_records(array, ReadLimits(max_row_bytes=200))] == rows  # streamed, item by item
    big_item = tmp_path / "big.json"
    big_item.write_text(json.dumps([{"text": "w" * (3 << 20)}]))
    assert refused(big_item, max_row_bytes=1 << 20).cap == "row_bytes"

    n = 200_000
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array(["What is 1+1? " * 8]))
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"prompt": text}), bomb, compression="zstd")
    assert bomb.stat().st_size < 20_000
    err = refused(bomb, max_rows=100_000)
    assert err.cap == "rows" and "holds 200000 rows, over the limit of 100000 rows" in str(err)
    err = refused(bomb, max_bytes=1 << 20)  # the metadata says ~KBs; the decoded bytes say otherwise
    assert err.cap == "bytes" and "expands to more than the limit of 1 MB" in str(err)
