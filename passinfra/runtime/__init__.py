"""Runtime: the reference interpreter (and, later, compiled-module loading)."""

from passinfra.runtime.interpreter import evaluate

__all__ = ["evaluate"]
