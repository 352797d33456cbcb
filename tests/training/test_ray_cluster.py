"""The Ray cluster reader's pure parts: the worker plan (preflight's rule) and its answers for addresses that
cannot be read. A real 2-node cluster is read in tests/training/test_ray.py."""

from __future__ import annotations

import json
import socket
import time

import pytest

from training_platform.training import ray_cluster

pytestmark = pytest.mark.unit


def node(cpu: float, gpu: float = 0.0) -> dict:
    return {"resources": {"CPU": {"total": cpu, "used": 0.0}, "GPU": {"total": gpu, "used": 0.0}}}


def test_plan_gives_each_worker_a_share_of_the_smallest_node():
    assert ray_cluster.plan_workers([node(8), node(4)], num_nodes=2, num_devices=2, use_gpu=False) == (2, [])
    assert ray_cluster.plan_workers([node(1), node(1)], num_nodes=2, num_devices=1, use_gpu=False) == (1, [])


def test_plan_names_the_field_that_asks_too_much():
    cpus, problems = ray_cluster.plan_workers([node(2)], num_nodes=2, num_devices=1, use_gpu=False)
    assert problems == [("resources.num_nodes", "2 nodes requested, the Ray cluster has 1 alive")]
    _, problems = ray_cluster.plan_workers([node(4, 1), node(4, 1)], num_nodes=2, num_devices=2, use_gpu=True)
    assert problems == [("resources.num_devices", "4 GPUs needed in all, the Ray cluster has 2")]
    # one CPU each at least: 3 single-process nodes x 2 processes = 6 CPUs on a 3-CPU cluster
    _, problems = ray_cluster.plan_workers([node(1)] * 3, num_nodes=3, num_devices=2, use_gpu=False)
    assert problems == [("resources.num_devices", "6 workers need 6 CPUs, the Ray cluster has 3")]


def test_addresses_that_cannot_be_read_say_why_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    started = time.monotonic()
    snap = ray_cluster.snapshot(f"127.0.0.1:{port}")
    assert "cannot be reached" in snap["error"] and time.monotonic() - started < 5
    assert "not a host:port" in ray_cluster.snapshot("headnode")["error"]
    assert "ray://" in ray_cluster.snapshot("ray://head:10001")["error"]
    assert ray_cluster.check("ray://head:10001", num_nodes=2, num_devices=1, use_gpu=False) == []
    problems = ray_cluster.check(f"127.0.0.1:{port}", num_nodes=2, num_devices=1, use_gpu=False)
    assert problems[0][0] == "resources.launcher" and "cannot be reached" in problems[0][1]


def test_cached_snapshot_reads_once_per_max_age(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        ray_cluster,
        "snapshot",
        lambda address: calls.append(address) or {"address": address, "checked_at": time.time(), "nodes": []},
    )
    first = ray_cluster.cached_snapshot("h:1", tmp_path, max_age_s=60)
    assert ray_cluster.cached_snapshot("h:1", tmp_path, max_age_s=60) == first and calls == ["h:1"]
    ray_cluster.cached_snapshot("h:2", tmp_path, max_age_s=60)  # another address is read anew
    assert calls == ["h:1", "h:2"]
    stale = json.loads((tmp_path / "cluster_status.json").read_text())
    stale["checked_at"] -= 120
    (tmp_path / "cluster_status.json").write_text(json.dumps(stale))
    ray_cluster.cached_snapshot("h:2", tmp_path, max_age_s=60)
    assert calls == ["h:1", "h:2", "h:2"]


def test_an_unwritable_cache_dir_still_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "snapshot", lambda address: {"address": address, "checked_at": time.time()})
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert ray_cluster.cached_snapshot("h:1", blocked / "ray")["address"] == "h:1"
