"""Item 5: the caches. Warm vs cold build, and one changed function.

Cold: a build into an empty ``codegen.cache_dir``. Warm: the same model built again into
the now filled directory, which the whole-build cache serves without running a pass
(``passinfra.codegen.build_cache``). Warm, objects only: the same with
``codegen.build_cache=False``, so every pass runs and only the C compiler is skipped.
Then a module whose ``main`` differs in one place (a ``tanh`` after the last op, fused
into the last kernel) is built warm: the whole-build cache misses, and only the kernels
whose C source changed are compiled, plus the host entry, whose call table necessarily
changes (``passinfra.codegen.object_cache.compile_stats``, in-process builds).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from bench.common import MIN_REPEATS, Sample, markdown_table, ratio, verdict
from passinfra.codegen.object_cache import compile_stats, reset_compile_stats

TARGET_WARM_SPEEDUP = 10.0


def _build(mod: Any, cache_dir: str, build_cache: bool = True) -> tuple[float, dict[str, int]]:
    import passinfra
    from passinfra.transform import PassContext

    reset_compile_stats()
    with PassContext(config={"codegen.cache_dir": cache_dir, "codegen.build_cache": build_cache}):
        started = time.perf_counter()
        passinfra.build(mod, opt_level=3)
        seconds = time.perf_counter() - started
    return seconds, compile_stats()


def one_changed(mod: Any) -> Any:
    """``mod`` with ``tanh`` applied to main's result (one kernel's code changes)."""
    from passinfra import ir
    from passinfra.ir import op

    main = mod["main"]
    changed = mod.copy()
    changed["main"] = ir.Function(main.params, op.tanh(main.body), None, main.attrs)
    return changed


def run(quick: bool) -> tuple[str, list[list[str]]]:
    from passinfra.frontend import from_onnx, zoo

    label = "zoo transformer (24 layers)"

    def fresh_module() -> Any:
        # a new import each time, as when a user runs their script again: nothing cached
        # on the nodes (structural hashes) carries over from the previous build
        return from_onnx(zoo.transformer(layers=24))

    cold, warm, objects_only = Sample("cold"), Sample("warm"), Sample("warm, objects only")
    stats: dict[str, dict[str, int]] = {}
    _build(fresh_module(), tempfile.mkdtemp(prefix="raypass-bench-warmup-"))  # imports, first touch
    for _ in range(MIN_REPEATS):
        with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as cache_dir:
            seconds, stats["cold"] = _build(fresh_module(), cache_dir)
            cold.values.append(seconds)
            seconds, stats["warm"] = _build(fresh_module(), cache_dir)
            warm.values.append(seconds)
            seconds, stats["warm, objects only"] = _build(fresh_module(), cache_dir, build_cache=False)
            objects_only.values.append(seconds)
            if "changed" not in stats:
                _, stats["changed"] = _build(one_changed(fresh_module()), cache_dir)
    speedup = ratio(cold, warm)
    objects_speedup = ratio(cold, objects_only)
    names = ("cold", "warm", "warm, objects only", "changed")
    rows = [
        [name, stats[name]["build_hits"], stats[name]["compiles"] - stats[name]["host_compiles"],
         stats[name]["host_compiles"], stats[name]["hits"], stats[name]["misses"]]
        for name in names
    ]
    kernels = stats["cold"]["compiles"] - stats["cold"]["host_compiles"]
    changed_kernels = stats["changed"]["compiles"] - stats["changed"]["host_compiles"]
    body = (
        f"{label}, in-process builds of a freshly imported module each time, {MIN_REPEATS} rounds "
        f"(each round in its own new cache directory).\n\n"
        + markdown_table(["build", "wall median [IQR]"],
                         [["cold", cold.spread()], ["warm", warm.spread()],
                          ["warm, objects only (codegen.build_cache=False)", objects_only.spread()]])
        + f"\n\n- warm speedup (cold / warm): {speedup.text()} (target >= {TARGET_WARM_SPEEDUP:g}x): "
        f"{verdict(speedup.median, TARGET_WARM_SPEEDUP, True)}. The whole-build cache serves the "
        "library, metadata and weights; no pass runs.\n"
        f"- with the whole-build cache off (every pass runs, the C compiler is skipped): "
        f"{objects_speedup.text()}.\n\n"
        "Counters (compile_stats) of the first round and of the one-change build:\n\n"
        + markdown_table(["build", "whole-build hits", "kernel compiles", "host compiles", "object hits",
                          "object misses"], rows)
        + f"\n\n- one function changed (tanh after main's last op): {changed_kernels} of {kernels} kernels "
        f"recompiled ({'only the changed kernel' if changed_kernels == 1 else 'see counters'}), plus the "
        "host entry, whose table of calls changed with the program."
    )
    headline = [
        [
            "cache: warm vs cold build",
            f"{speedup.median:.2f}x",
            f"{speedup.low:.2f}-{speedup.high:.2f}",
            f">= {TARGET_WARM_SPEEDUP:g}x",
            verdict(speedup.median, TARGET_WARM_SPEEDUP, True),
        ],
        [
            "cache: one function changed -> kernels recompiled",
            f"{changed_kernels} of {kernels}",
            "counter",
            "1",
            "met" if changed_kernels == 1 else f"MISSED ({changed_kernels} compiled)",
        ],
    ]
    return body, headline
