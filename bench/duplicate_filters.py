"""Why identical output channels needed a guarantee, and what DeduplicateFilters costs.

    python -m bench.duplicate_filters [--output bench/results_duplicate_filters.md]

1. Probe: ``sgemm`` (OpenBLAS, one thread) of A[169, 512] x B[1000, 512]^T with every row
   of B equal, under each OpenBLAS kernel this CPU can run (``OPENBLAS_CORETYPE``, one
   process each): how many output columns differ from the middle one. Nonzero means the
   kernel's rounding depends on a column's position.
2. The light SqueezeNet (onnx's shipped test, generated weights) compiled and run under
   each kernel, with and without the pass: distinct values of its 1000 softmax outputs
   (the expected output is 0.001 everywhere).
3. Cost on models without duplicate filters (random weights): the pass's time over the
   whole module (median of interleaved runs), and whether it changed the module.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.codegen import DENSENET, LIGHT_DIR, RESNET50, random_light_weights
from bench.common import ROOT, machine_notes, markdown_table
from passinfra.testing import OPENBLAS_KERNELS, cpu_flags

PROBE = r"""
import ctypes, json, os, numpy as np, scipy_openblas32
lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"))
lib.scipy_openblas_set_num_threads(1)
P, I = ctypes.c_void_p, ctypes.c_int
lib.scipy_cblas_sgemm.argtypes = [I] * 6 + [ctypes.c_float, P, I, P, I, ctypes.c_float, P, I]
M, N, K = 169, 1000, 512
a = np.random.default_rng(0).uniform(0, 1000, (M, K)).astype(np.float32)
b = np.full((N, K), 0.02, np.float32)
c = np.zeros((M, N), np.float32)
lib.scipy_cblas_sgemm(101, 111, 112, M, N, K, 1.0, a.ctypes.data, K, b.ctypes.data, K, 0.0, c.ctypes.data, N)
print(json.dumps(int((c != c[:, [N // 2]]).any(axis=0).sum())))
"""

SQUEEZENET = r"""
import json, sys, onnx, numpy as np
import passinfra
from passinfra.frontend import from_onnx
from passinfra.transform import PassContext
model = onnx.load(sys.argv[1])
data = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
disabled = ["DeduplicateFilters"] if sys.argv[3] == "off" else []
with PassContext(disabled_pass=disabled, config={"codegen.cache_dir": sys.argv[2]}):
    out = passinfra.build(from_onnx(model), opt_level=3)(data)
print(json.dumps(int(np.unique(out).size)))
"""


def in_subprocess(script: str, kernel: str, *args: str) -> int:
    env = dict(os.environ, OPENBLAS_CORETYPE=kernel)
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def pass_cost(path: str, repeats: int = 5) -> tuple[float, float, bool]:
    """(median seconds of DeduplicateFilters over the optimized module, of FoldConstant
    for scale, whether the pass changed anything)."""
    import onnx

    from passinfra.build import compile_pipeline
    from passinfra.frontend import from_onnx
    from passinfra.transform import DeduplicateFilters, FoldConstant, PassContext

    mod = from_onnx(random_light_weights(onnx.load(path)))
    passes = compile_pipeline().passes
    graph_passes = passes[: [p.info.name for p in passes].index("DeduplicateFilters")]
    with PassContext(opt_level=3):
        for graph_pass in graph_passes:
            mod = graph_pass(mod)
        dedup, fold, times = DeduplicateFilters(), FoldConstant(), {"dedup": [], "fold": []}
        for _ in range(repeats):
            for name, run in (("dedup", dedup), ("fold", fold)):
                start = time.perf_counter()
                out = run(mod)
                times[name].append(time.perf_counter() - start)
                if name == "dedup":
                    changed = out["main"] is not mod["main"]
    median = lambda values: sorted(values)[len(values) // 2]
    return median(times["dedup"]), median(times["fold"]), changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.duplicate_filters", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_duplicate_filters.md"))
    args = parser.parse_args(argv)
    flags = cpu_flags()
    kernels = [kernel for kernel in sorted(OPENBLAS_KERNELS) if OPENBLAS_KERNELS[kernel] <= flags]
    squeezenet = os.path.join(LIGHT_DIR, "light_squeezenet.onnx")
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for kernel in kernels:
            rows.append([kernel, in_subprocess(PROBE, kernel),
                         in_subprocess(SQUEEZENET, kernel, squeezenet, cache, "off"),
                         in_subprocess(SQUEEZENET, kernel, squeezenet, cache, "on")])
    cost_rows = []
    for label, path in (("ResNet-50 (light, random weights)", RESNET50),
                        ("DenseNet-121 (light, random weights)", DENSENET)):
        dedup, fold, changed = pass_cost(path)
        cost_rows.append([label, f"{dedup * 1e3:.1f}", f"{fold * 1e3:.1f}", "yes" if changed else "no"])
    notes = machine_notes()
    text = "\n".join([
        "# Identical output channels across OpenBLAS kernels (`python -m bench.duplicate_filters`)",
        "",
        f"Machine: {notes['machine']}; kernels this CPU can run: {', '.join(kernels)}.",
        "",
        markdown_table(["OpenBLAS kernel", "sgemm columns differing (of 1000, equal filters)",
                        "light SqueezeNet distinct outputs, pass off", "pass on (expected: 1)"], rows),
        "",
        "Cost of DeduplicateFilters on models without duplicate filters (median of 5, in-process):",
        "",
        markdown_table(["model", "DeduplicateFilters ms", "FoldConstant ms (for scale)", "module changed"],
                       cost_rows),
        "",
    ])
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
