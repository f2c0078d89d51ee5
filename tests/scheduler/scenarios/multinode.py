"""Scenario (run in a subprocess): a simulated cluster of a head and two worker nodes.

Workers are spread over the two nodes; one node is removed while a stage is running;
the run must still finish with the in-process result. Prints one JSON line.
"""

import json
import threading

import ray
from ray.cluster_utils import Cluster

from passinfra.transform import Sequential
from scheduler import Scheduler
from scheduler.pool.ray_runtime import local_worker_env
from tests.scheduler import passes_for_tests as P


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, runtime_env=local_worker_env(), log_to_driver=False)
    pipeline = Sequential([P.add_to_multiply, P.sleep_20ms, P.tag_opt_level], opt_level=0)
    mod = P.chain_module(60)
    expected = pipeline(mod).astext()
    result = {}
    try:
        with Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5) as sched:
            sched.start_workers()
            result["worker_nodes"] = sorted({slot.info["node_id"] for slot in sched.worker_pool.slots})
            victim = next(n for n in nodes if n.node_id in result["worker_nodes"])
            timer = threading.Timer(0.4, cluster.remove_node, args=(victim,))
            timer.start()
            out = sched.run(pipeline, mod)
            timer.join()
            result["identical"] = out.astext() == expected
            result["retries"] = sched.last_run.retries
            result["restarts"] = sched.last_run.worker_restarts
            result["nodes_after"] = sorted({slot.info["node_id"] for slot in sched.worker_pool.slots})
            result["victim"] = victim.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
