"""Runtime: the reference interpreter (and, later, compiled-module loading)."""

from passinfra.runtime.interpreter import Closure, evaluate

__all__ = ["Closure", "evaluate"]
