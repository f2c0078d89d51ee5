"""Scenario (run in a subprocess): kernels compiled on one node are not compiled again
on another. A head and node A compile a model; node A goes, node B (a disk of its own:
an empty object cache) joins, and the same model compiles on B from the cluster's kernel
store. Each node's disk is a cache directory of its own (``XDG_CACHE_HOME`` of its
raylet, which its workers inherit). Prints one JSON line."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import passinfra
from passinfra.frontend.zoo.ir_models import demo_cnn
from passinfra.transform import PassContext
from scheduler import Scheduler
from scheduler.pool.ray_runtime import local_worker_env

# the whole-build cache would skip the second build's kernel stage altogether
CONFIG = {"codegen.build_cache": False}


def _build_on_workers(mod):
    with PassContext(opt_level=3, config=CONFIG), \
            Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5) as sched:
        lib = passinfra.build(mod, opt_level=3, scheduler=sched)
        nodes = sorted({slot.info["node_id"] for slot in sched.worker_pool.slots})
        hits = [fact.value for fact in sched.last_run.facts if fact.name == "cache_hit"]  # per kernel
        objects = sum(1 for event in sched.last_run.events if event.pass_name == "CompileC")  # per unit
    return lib, nodes, hits, objects


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="rp-shared-kernels-"))
    disks = {name: root / name for name in ("driver", "a", "b")}
    result: dict = {"temp_dir": str(root)}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        node_a = cluster.add_node(num_cpus=1, env_vars={"XDG_CACHE_HOME": str(disks["a"])})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, runtime_env=local_worker_env(), log_to_driver=False)
        mod = demo_cnn(batch=1, size=16, conv_channels=16)
        with PassContext(opt_level=3, config={"codegen.no_cache": True}):
            local = passinfra.build(mod, opt_level=3)  # the in-process reference, cold
        first, result["first_nodes"], result["first_hits"], _ = _build_on_workers(mod)
        cluster.remove_node(node_a)
        node_b = cluster.add_node(num_cpus=1, env_vars={"XDG_CACHE_HOME": str(disks["b"])})
        cluster.wait_for_nodes()
        second, result["second_nodes"], result["second_hits"], objects = _build_on_workers(mod)
        result["second_objects"] = objects
        result["node_a"], result["node_b"] = node_a.node_id, node_b.node_id
        result["identical"] = first.library_bytes == second.library_bytes == local.library_bytes
        result["b_cached"] = sum(1 for _ in (disks["b"] / "raypass" / "objects").rglob("*.o"))
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    result["removed"] = not root.exists()
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
