"""Item 5: the compile cache. Warm vs cold build, and one changed function.

Cold: a build into an empty ``codegen.cache_dir``; warm: the same build again into the
now filled directory. Then a module whose ``main`` differs in one place (a ``tanh`` after
the last op, fused into the last kernel) is built warm: only the kernels whose C source
changed are compiled (``passinfra.codegen.cache.compile_stats``, in-process builds).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from bench.common import MIN_REPEATS, Sample, markdown_table, ratio, verdict
from passinfra.codegen.cache import compile_stats, reset_compile_stats

TARGET_WARM_SPEEDUP = 10.0


def _build(mod: Any, cache_dir: str) -> tuple[float, dict[str, int]]:
    import passinfra
    from passinfra.transform import PassContext

    reset_compile_stats()
    with PassContext(config={"codegen.cache_dir": cache_dir}):
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
    mod = from_onnx(zoo.transformer(layers=24))
    cold, warm = Sample("cold"), Sample("warm")
    stats: dict[str, dict[str, int]] = {}
    _build(mod, tempfile.mkdtemp(prefix="raypass-bench-warmup-"))  # imports, first touch
    for _ in range(MIN_REPEATS):
        with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as cache_dir:
            seconds, stats["cold"] = _build(mod, cache_dir)
            cold.values.append(seconds)
            seconds, stats["warm"] = _build(mod, cache_dir)
            warm.values.append(seconds)
            if "changed" not in stats:
                _, stats["changed"] = _build(one_changed(mod), cache_dir)
    speedup = ratio(cold, warm)
    rows = [
        [name, stats[name]["compiles"], stats[name]["hits"], stats[name]["misses"]]
        for name in ("cold", "warm", "changed")
    ]
    kernels = stats["cold"]["compiles"] + stats["cold"]["hits"]
    changed_compiles = stats["changed"]["compiles"]
    body = (
        f"{label}, in-process builds, {MIN_REPEATS} cold/warm pairs (each pair in its own new cache "
        f"directory).\n\n"
        + markdown_table(["build", "wall median [IQR]"], [["cold", cold.spread()], ["warm", warm.spread()]])
        + f"\n\n- warm speedup (cold / warm): {speedup.text()} (target >= {TARGET_WARM_SPEEDUP:g}x): "
        f"{verdict(speedup.median, TARGET_WARM_SPEEDUP, True)}. A warm build still runs every graph pass, "
        "lowering and C rendering; only the C compiler is skipped.\n\n"
        "Compile counters (compile_stats) of the first pair and of the one-change build:\n\n"
        + markdown_table(["build", "compiler runs", "cache hits", "cache misses"], rows)
        + f"\n\n- one function changed (tanh after main's last op): {changed_compiles} of {kernels} kernels "
        f"recompiled ({'only the changed kernel' if changed_compiles == 1 else 'see counters'})."
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
            f"{changed_compiles} of {kernels}",
            "counter",
            "1",
            "met" if changed_compiles == 1 else f"MISSED ({changed_compiles} compiled)",
        ],
    ]
    return body, headline
