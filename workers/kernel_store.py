"""A cluster's view of the kernel cache: what one node compiled, the others reuse.

Each machine caches compiled objects on its own disk (``passinfra.codegen.object_cache``).
On a cluster of several nodes that is not enough: a kernel compiled on one node would be
compiled again on every other that meets it. So the workers of a multi-node cluster
share one :class:`KernelStore`, a named actor on the head node (``raypass-kernels`` in
the ``raypass`` namespace) that keeps objects by their cache key, in memory, the oldest
forgotten first past ``MAX_BYTES``. A worker installs :class:`StoreTier` as its object
cache's shared tier (``object_cache.set_shared_tier``): a miss on its own disk asks the
store before running the compiler, and what it compiles goes to the store too. The key
names the C source, the compiler and the flags, so a hit is the very object the node
would have compiled: libraries stay byte-identical.

On one node the disk is already shared by every worker, and the store is not used. It is
detached: it serves every driver of the cluster (a pool's, a user's) until the cluster
stops, which is what a cluster-wide cache is for.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

STORE_NAME = "raypass-kernels"
STORE_NAMESPACE = "raypass"
MAX_BYTES = 1 << 30  # of the head node's memory; objects are tens of kilobytes each
GET_TIMEOUT = 10.0  # seconds; past it the worker compiles the kernel itself


class KernelStore:
    """The actor: cache key -> object bytes, least recently used forgotten first."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self.hits = self.misses = 0

    def get(self, key: str) -> bytes | None:
        data = self._objects.get(key)
        if data is None:
            self.misses += 1
            return None
        self._objects.move_to_end(key)
        self.hits += 1
        return data

    def put(self, key: str, data: bytes) -> None:
        if key in self._objects:
            return
        self._objects[key] = data
        self._bytes += len(data)
        while self._bytes > self._max and self._objects:
            _, old = self._objects.popitem(last=False)
            self._bytes -= len(old)

    def stats(self) -> dict[str, int]:
        return {"objects": len(self._objects), "bytes": self._bytes, "hits": self.hits, "misses": self.misses}


class StoreTier:
    """A worker's handle on the store, as ``object_cache.SharedTier``."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def get(self, key: str) -> bytes | None:
        import ray

        try:
            return ray.get(self._actor.get.remote(key), timeout=GET_TIMEOUT)
        except Exception:  # noqa: BLE001  (a store gone or slow: compile it here)
            return None

    def put(self, key: str, data: bytes) -> None:
        try:
            self._actor.put.remote(key, data)  # no reply awaited
        except Exception:  # noqa: BLE001  (a store gone: nothing shared, nothing lost)
            pass


def cluster_store() -> Any:
    """The cluster's store actor, made on the head node by the first worker that asks."""
    import ray

    return ray.remote(KernelStore).options(
        name=STORE_NAME, namespace=STORE_NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, resources={"node:__internal_head__": 0.001},
    ).remote()


def install_if_multinode() -> bool:
    """In a Ray worker: share kernels through the cluster's store when the cluster has
    more than one node (see the module docstring). Returns whether it did."""
    import ray

    from passinfra.codegen.object_cache import set_shared_tier

    try:  # an optimization: a worker that cannot reach the store compiles on its own
        if not ray.is_initialized() or sum(1 for node in ray.nodes() if node.get("Alive")) < 2:
            return False
        set_shared_tier(StoreTier(cluster_store()))
    except Exception:  # noqa: BLE001
        return False
    return True


__all__ = ["MAX_BYTES", "STORE_NAME", "STORE_NAMESPACE", "KernelStore", "StoreTier", "cluster_store",
           "install_if_multinode"]
