"""The scheduler: plans pipelines as a networkx DAG and runs function passes on Ray workers."""

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
