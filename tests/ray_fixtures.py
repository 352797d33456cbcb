"""One local 2-node Ray cluster per test process (`ray.cluster_utils.Cluster`: 2 CPUs, as a plain `ray start` gives on
this 2-core machine, and 120 MB of object store per node, no GPUs, loopback only, no dashboard), shared by every
test that asks for `ray_cluster` (the Ray Train launcher's tests, verl's RL on the cluster, the Ray e2e tests). A
plugin the root conftest loads; Ray is imported only when a test asks for it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# Ray resolves 127.0.0.1 to the machine's routable address unless told it is not a multi-machine setup; the test
# cluster and its clients stay on loopback.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
NODE_CPUS = 2
CLUSTER_CPUS = 2.0 * NODE_CPUS  # the session cluster: 2 nodes


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """predicate()'s first truthy value, or AssertionError after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return value


def free_cpus(address: str) -> float:
    """The cluster's free CPUs, asked from this process (joined for the question only, unless it already is): a
    test sees its Ray tasks and actors gone when they are back to CLUSTER_CPUS."""
    import ray

    joined_here = not ray.is_initialized()
    if joined_here:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False, configure_logging=False)
    try:
        return ray.available_resources().get("CPU", 0.0)
    finally:
        if joined_here:
            ray.shutdown()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    old = {k: os.environ.get(k) for k in LOOPBACK}
    os.environ.update(LOOPBACK)  # before Ray is imported: it reads the variable once, at import
    from ray import cluster_utils  # a dependency: without it this fails, never skips
    from ray._private import ray_constants

    # ... and in case something imported Ray earlier: drivers in this process (a test's ray.init) stay on loopback
    ray_constants.ENABLE_RAY_CLUSTER = False
    node = {"num_cpus": NODE_CPUS, "object_store_memory": 120 * 2**20, "node_ip_address": "127.0.0.1"}
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
