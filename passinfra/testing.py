"""Builders shared by the test suite and the benchmarks.

Both ``tests/`` and ``bench/`` need the same small programs, passes and machine facts;
they live here, in the shipped package, so that a benchmark never imports a test module
(``tests`` is not installed, and importing a test module runs its fixtures' imports).
Like the rest of ``passinfra`` this module does not import Ray (the scheduler tests ship
:data:`identity` to Ray workers, where this module imports as it does in the driver).

* :func:`make_chain`: one ``main`` that is a 100,000-deep chain of adds, for depth tests
  and the IR scaling benchmark;
* :func:`chain_module` and :data:`identity`: many small independent functions and a
  function pass that leaves them alone, for measuring the scheduler's own overhead;
* :data:`OPENBLAS_KERNELS` and :func:`cpu_flags`: which OpenBLAS sgemm kernels this CPU
  can run (the DeduplicateFilters check and benchmark force each in turn).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.transform import function_pass


def make_chain(
    n: int, kind: str = "add", shape: tuple[int, ...] = (2,), dtype: str = "float32"
) -> ir.IRModule:
    """``main(x) = x + x + ... + x`` with ``n`` add calls, built without recursion.

    ``kind="add"`` nests the calls directly (dataflow depth ``n``); ``kind="let"`` binds
    each partial sum to its own variable (a Let chain of ``n`` bindings). Either way
    ``main(x) == (n + 1) * x``.
    """
    x = ir.var("x", shape, dtype)
    if kind == "add":
        acc: Expr = x
        for _ in range(n):
            acc = op.add(acc, x)
        return ir.IRModule({"main": ir.Function([x], acc)})
    if kind == "let":
        variables = [ir.Var(f"v{i}") for i in range(n)]
        body: Expr = variables[-1] if n else x
        for i in range(n - 1, -1, -1):
            previous = variables[i - 1] if i else x
            body = ir.Let(variables[i], op.add(previous, x), body)
        return ir.IRModule({"main": ir.Function([x], body)})
    raise ValueError(f"make_chain kind must be 'add' or 'let', got {kind!r}")


def chain_module(num_functions: int, length: int = 20) -> ir.IRModule:
    """``num_functions`` independent functions ``f0``, ``f1``, ... (each tagged with its
    name in attr ``tag``), each a chain of ``length`` adds of a constant to its input."""
    mod = ir.IRModule()
    for i in range(num_functions):
        x = ir.var("x", (4,))
        body: Expr = x
        for j in range(length):
            body = op.add(body, ir.const(float(j % 7)))
        mod[f"f{i}"] = ir.Function([x], body).with_attr("tag", f"f{i}")
    return mod


@function_pass(opt_level=0, name="Identity", reads_module=False)
def identity(func: Any, mod: ir.IRModule, ctx: Any) -> Any:
    """A function pass with no work of its own: what a run of it costs is the scheduler's."""
    return func

# OpenBLAS core type (``OPENBLAS_CORETYPE``) -> the CPU flags (/proc/cpuinfo) its kernels need
OPENBLAS_KERNELS: dict[str, set[str]] = {
    "Haswell": {"avx2", "fma"},
    "SkylakeX": {"avx512f", "avx512bw", "avx512dq", "avx512vl"},
    "Sandybridge": {"avx"},
    "Nehalem": {"sse4_2"},
}


def cpu_flags() -> set[str]:
    """The CPU's flags (empty where /proc/cpuinfo cannot be read). Under
    ``RAYPASS_MAX_ISA=avx2`` or ``portable`` (the suite's AVX2-only mode, tests/avx2_only.py)
    the AVX-512 ones are left out, so a check skips what such a CPU could not run."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    flags = set(line.split(":", 1)[-1].split())
    if os.environ.get("RAYPASS_MAX_ISA") in ("avx2", "portable"):
        flags = {flag for flag in flags if not flag.startswith("avx512")}
    return flags


__all__ = ["make_chain", "chain_module", "identity", "OPENBLAS_KERNELS", "cpu_flags"]
