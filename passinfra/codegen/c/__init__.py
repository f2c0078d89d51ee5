"""The C that libraries link besides their kernels, kept as C files: the convolution
microkernels (``conv_runtime.c``, see :mod:`passinfra.codegen.conv_runtime`) and the
thread pool of the kernels' parallel loops (``thread_pool.c``, see
:mod:`passinfra.codegen.thread_pool`). They can be read, highlighted and compiled on
their own; their tunables are macros the Python side defines in front of them (a
missing one is an ``#error``), so each number lives in one place."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def read_c_file(name: str) -> str:
    """The text of the C file ``name`` of this package."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


__all__ = ["read_c_file"]
