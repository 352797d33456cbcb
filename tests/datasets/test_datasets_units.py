"""Pieces of the dataset platform that need no services: the streaming multipart parser, the read-progress probe of
data jobs, report compaction."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


class Collect:
    def __init__(self, boundary: bytes):
        from training_platform.api.routes.datasets import MultipartStream

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
    return (f"preamble\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nmy-set\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".jsonl\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + payload + \
        f"\r\n--{boundary}--\r\nepilogue".encode()


@pytest.mark.parametrize("chunk", [1, 3, 17, 4096])
def test_multipart_stream_any_chunking(chunk):
    boundary = "XyZ"
    payload = b"line one\r\n--XyNot the boundary\r\n--X\r\nlast"  # boundary look-alikes inside the data
    collect = Collect(boundary.encode())
    body = _body(boundary, payload)
    for i in range(0, len(body), chunk):
        collect.parser.feed(body[i:i + chunk])
    collect.parser.close()
    assert collect.parts == [["name", None, b"my-set"], ["file", 'a "b".jsonl', payload]]
    assert collect.ended == 2


def test_multipart_stream_rejects_truncated_and_malformed_bodies():
    from training_platform.api.routes.datasets import MultipartError, _content_disposition

    collect = Collect(b"XyZ")
    collect.parser.feed(_body("XyZ", b"data")[:-20])
    with pytest.raises(MultipartError, match="ended before"):
        collect.parser.close()
    collect = Collect(b"XyZ")
    with pytest.raises(MultipartError, match="Content-Disposition"):
        collect.parser.feed(b"--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--")
    assert _content_disposition("form-data; name=file; filename*=UTF-8''na%C3%AFve.jsonl") == {
        "name": "file", "filename": "na\u00efve.jsonl"}


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
    from training_platform.db.datasets_crud import compact

    report = {"clusters": [[i, i + 1] for i in range(500)], "nested": {"rows": list(range(3))}, "n": 1}
    out = compact(report, max_items=10)
    assert len(out["clusters"]) == 10 and out["clusters_total"] == 500
    assert out["nested"] == {"rows": [0, 1, 2]} and out["n"] == 1
