"""The scheduler: plans pipelines as a networkx DAG and runs function passes on Ray workers.

``Scheduler`` runs a pipeline (``scheduler.scheduler``); ``scheduler.pool`` keeps a warm
pool of workers that every scheduler on the machine (or on the cluster at an address)
uses: ``pool.start(workers=2)``, ``pool.status()``, ``pool.stop()``.
"""

from scheduler.plan import FunctionStage, ModuleBarrier, Plan, PlanNode, build_plan
from scheduler.reproducer import replay
from scheduler.scheduler import Scheduler
from scheduler.stats import RunStats

__all__ = [
    "Scheduler",
    "build_plan",
    "replay",
    "Plan",
    "PlanNode",
    "FunctionStage",
    "ModuleBarrier",
    "RunStats",
]
