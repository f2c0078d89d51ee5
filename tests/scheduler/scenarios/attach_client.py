"""Scenario (run in a subprocess): attach to a running Ray cluster at ADDRESS, run the
built-in passes there, compare with the in-process result. Prints one JSON line."""

import json
import sys

from passinfra.frontend.zoo.ir_models import demo_cnn, transformer_block
from passinfra.ir import IRModule
from passinfra.transform import FoldConstant, InferType, PassContext, Sequential, SimplifyInference
from scheduler import Scheduler


def main(address: str) -> None:
    mod = IRModule()
    for i, model in enumerate([demo_cnn(seed=1), transformer_block(seed=2), demo_cnn(seed=3)]):
        mod[f"model{i}"] = model["main"]
    pipeline = Sequential([InferType(), SimplifyInference(), FoldConstant()], opt_level=3)
    with PassContext(opt_level=3):
        expected = pipeline(mod).astext()
        with Scheduler(backend="ray", address=address, num_workers=2, cpus_per_worker=0.5) as sched:
            out = sched.run(pipeline, mod)
            pids = sorted(set(sched.last_run.worker_pids.values()))
            attached = sched.ray_handle.attached
    print(json.dumps({"identical": out.astext() == expected, "worker_pids": pids, "attached": attached}))


if __name__ == "__main__":
    main(sys.argv[1])
