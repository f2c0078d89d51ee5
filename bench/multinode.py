"""A model compiled on a simulated cluster of several nodes, twice, on two node sets (issue 28).

A ``ray.cluster_utils.Cluster`` gets a head with no CPUs and a first set of worker nodes
(``--nodes`` of ``--cpus`` each), every node with a disk of its own (the
``XDG_CACHE_HOME`` of its raylet, which its workers inherit: an empty object cache).
The model compiles on one worker per CPU; then the first set goes, a second set of
fresh nodes joins, and the same model compiles again. The second compile should take
every kernel from the cluster's kernel store (a cache hit per kernel, nothing compiled
again), and both libraries should be byte-identical to an in-process build. The
whole-build cache is off, so the kernel stage really runs on the second set.

    python -m bench.multinode [--model densenet121] [--nodes 2] [--cpus 4]

Prints one JSON line: nodes of each compile, kernels, cache hits, seconds, identical.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.before_after import model_arg


def _compile_on_workers(mod, workers: int) -> tuple[object, dict]:
    import passinfra
    from passinfra.transform import PassContext
    from scheduler import Scheduler

    started = time.perf_counter()
    # the whole-build cache would skip the second compile's kernel stage altogether
    with PassContext(opt_level=3, config={"codegen.build_cache": False}), \
            Scheduler(backend="ray", num_workers=workers, cpus_per_worker=1) as sched:
        lib = passinfra.build(mod, opt_level=3, scheduler=sched)
        hits = [fact.value for fact in sched.last_run.facts if fact.name == "cache_hit"]
        nodes = sorted({slot.info["node_id"] for slot in sched.worker_pool.slots})
    return lib, {"seconds": round(time.perf_counter() - started, 2), "nodes": nodes, "kernels": len(hits),
                 "cache_hits": sum(1 for hit in hits if hit)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.multinode", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="densenet121")
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes in each of the two sets")
    parser.add_argument("--cpus", type=int, default=4, help="CPUs of each worker node")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rp-multinode-"))
    os.environ["XDG_CACHE_HOME"] = str(root / "driver")  # the driver's disk is none of the nodes'
    import ray
    from ray.cluster_utils import Cluster

    import passinfra
    from passinfra.frontend import from_onnx
    from passinfra.transform import PassContext
    from scheduler.pool.ray_runtime import local_worker_env

    result: dict = {"model": args.model, "nodes_per_set": args.nodes, "cpus_per_node": args.cpus}
    # no dashboard: the packages carried to the 16-core machine leave its web client out
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        mod = from_onnx(model_arg(args.model, root))
        started = time.perf_counter()
        with PassContext(opt_level=3, config={"codegen.no_cache": True}):
            local = passinfra.build(mod, opt_level=3)  # the in-process reference, cold
        result["local_seconds"] = round(time.perf_counter() - started, 2)
        workers = args.nodes * args.cpus
        libraries = []
        for name in ("first", "second"):
            started = time.perf_counter()
            disks = [root / f"{name}{i}" for i in range(args.nodes)]
            nodes = [cluster.add_node(num_cpus=args.cpus, env_vars={"XDG_CACHE_HOME": str(disk)})
                     for disk in disks]
            cluster.wait_for_nodes()
            if not ray.is_initialized():
                ray.init(address=cluster.address, runtime_env=local_worker_env(), log_to_driver=False)
            result[f"{name}_nodes_up_seconds"] = round(time.perf_counter() - started, 2)
            lib, result[name] = _compile_on_workers(mod, workers)
            result[name]["on_this_set"] = set(result[name]["nodes"]) <= {node.node_id for node in nodes}
            libraries.append(lib)
            for node in nodes:
                cluster.remove_node(node)
        result["identical_to_local"] = all(lib.library_bytes == local.library_bytes for lib in libraries)
        result["second_all_hits"] = result["second"]["cache_hits"] == result["second"]["kernels"] > 0
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    return 0 if result.get("identical_to_local") and result.get("second_all_hits") else 1


if __name__ == "__main__":
    sys.exit(main())
