"""Runtime: the reference interpreter and compiled-module loading."""

from passinfra.runtime.interpreter import Closure, evaluate
from passinfra.runtime.module import Module, load_module

__all__ = ["Closure", "evaluate", "Module", "load_module"]
