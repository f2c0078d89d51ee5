"""Scenario (run in a subprocess): a warm pool on a simulated cluster of a head and two
worker nodes, found by a driver that knows only the cluster's address (not the pool's
record on this machine). Prints one JSON line."""

import json
import os
import shutil
import tempfile

import ray
from ray.cluster_utils import Cluster

from passinfra.transform import Sequential
from scheduler import Scheduler, pool
from tests.scheduler import passes_for_tests as P


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    started_in = tempfile.mkdtemp(prefix="rp-pool-a-")
    driver_sees = tempfile.mkdtemp(prefix="rp-pool-b-")
    result = {"temp_dirs": [started_in, driver_sees]}
    try:
        os.environ["RAYPASS_POOL_DIR"] = started_in
        pool.start(workers=2, address=cluster.address, idle_timeout_minutes=10)
        # the driver has no record of the pool: it must find it in the cluster
        os.environ["RAYPASS_POOL_DIR"] = driver_sees
        pipeline = Sequential([P.add_to_multiply, P.tag_opt_level], opt_level=0)
        mod = P.chain_module(12)
        with Scheduler(backend="ray", address=cluster.address) as sched:
            out = sched.run(pipeline, mod)
            result["found"] = sched.last_run.workers
            result["remote_calls"] = sched.last_run.remote_calls
        result["identical"] = out.astext() == pipeline(mod).astext()
        status = pool.status(cluster.address)
        result["worker_nodes"] = sorted({worker["node_id"] for worker in status.workers})
        result["runs_served"] = status.runs_served
    finally:
        pool.stop(cluster.address)
        os.environ["RAYPASS_POOL_DIR"] = started_in
        pool.stop()  # a no-op when the pool is gone
        ray.shutdown()
        cluster.shutdown()
        for directory in (started_in, driver_sees):  # the machine as the test found it
            shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
