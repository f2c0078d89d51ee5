"""Two source trees, same results, same speed: what a restructuring must keep (issue 30).

For a tree ``--before`` (a checkout of an earlier commit: ``git worktree add /tmp/before
REV``) and this checkout:

1. **Identical output.** For zoo resnet, zoo transformer, DenseNet-121 (light) and a
   QDQ model (built here: quantize, dequantize, an int8-weight convolution, requantize),
   ``raypass compile --backend local --no-cache`` with ``--dump-ir`` (the module after
   every pass), ``--emit c`` (the generated C) and ``-o`` (the library and its weights)
   in each tree; every file is compared byte for byte.
2. **Same speed, interleaved.** Each round runs, in both trees: the IR operations of
   :mod:`bench.ir_scaling` on add chains (CPU time of the operations, summed), and a
   whole ``raypass compile`` process of DenseNet-121 (light) on the local backend (wall
   time, start-up included). Medians, ranges and the ratio this/before.

    python -m bench.tree_parity --before /tmp/before [--rounds 5] [--sizes 10000,100000]
                                [--output bench/results_tree_parity.md]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine_notes, markdown_table

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 1200.0

# run inside a tree: bench/ir_scaling.py's operations, loaded by path (an older tree's
# bench is not a package), their summed CPU time printed as JSON
_IR_OPERATIONS = """
import json, runpy, sys, time
scaling = runpy.run_path("bench/ir_scaling.py", run_name="tree_parity")
sizes = [int(n) for n in sys.argv[1].split(",")]
results = scaling["measure"](sizes, 1, time.process_time)
print(json.dumps({name: by_size[sizes[-1]] for name, by_size in results.items()}))
"""


def densenet_path() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_densenet121.onnx")


def write_qdq_model(path: Path) -> None:
    """A small QDQ model: what a quantization tool emits around one convolution."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {
        "w_q": rng.integers(-100, 100, size=(8, 3, 3, 3)).astype(np.int8), "w_s": np.float32(0.02),
        "w_z": np.int8(0), "x_s": np.float32(0.05), "x_z": np.uint8(128), "y_s": np.float32(0.1),
        "y_z": np.uint8(0), "b": rng.standard_normal(8).astype(np.float32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"]),
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "y_s", "y_z"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(np.asarray(value), name) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def raypass(tree: Path, *args: str) -> float:
    """Run ``raypass ARGS`` with ``tree``'s code; the process's wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # time what a user's process runs: cached bytecode
    command = [sys.executable, "-c", "import sys; from raypass_cli.main import cli; cli()", *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"raypass {' '.join(args)} failed in {tree}:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def outputs(tree: Path, model: str, into: Path) -> None:
    into.mkdir(parents=True)
    raypass(tree, "compile", model, "--backend", "local", "--no-cache", "--dump-ir", str(into / "ir"),
            "-o", str(into / "model.so"))
    raypass(tree, "compile", model, "--backend", "local", "--no-cache", "--emit", "c",
            "-o", str(into / "model.c"))


def differing_files(left: Path, right: Path) -> list[str]:
    """Relative paths under either directory that are missing on one side or differ."""
    names = {p.relative_to(left) for p in left.rglob("*") if p.is_file()}
    names |= {p.relative_to(right) for p in right.rglob("*") if p.is_file()}
    return sorted(str(name) for name in names
                  if not ((left / name).is_file() and (right / name).is_file()
                          and filecmp.cmp(left / name, right / name, shallow=False)))


def ir_seconds(tree: Path, sizes: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _IR_OPERATIONS, sizes], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"the IR operations failed in {tree}:\n{done.stderr[-2000:]}")
    return sum(json.loads(done.stdout.strip().splitlines()[-1]).values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tree_parity", description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="the source tree to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="10000,100000", help="add-chain sizes of the IR operations")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results_tree_parity.md")
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory(prefix="raypass-tree-parity-") as scratch:
        space = Path(scratch)
        qdq = space / "qdq.onnx"
        write_qdq_model(qdq)
        models = {"zoo resnet": "zoo:resnet", "zoo transformer": "zoo:transformer",
                  "densenet121 (light)": densenet_path(), "QDQ conv": str(qdq)}
        identity_rows = []
        for label, model in models.items():
            for name, tree in trees.items():
                outputs(tree, model, space / label.replace(" ", "_") / name)
            base = space / label.replace(" ", "_")
            passes = len(list((base / "this" / "ir").iterdir()))
            diff = differing_files(base / "before", base / "this")
            verdict = "identical" if not diff else "DIFFER: " + ", ".join(diff[:5])
            identity_rows.append([label, str(passes), verdict])
            print(f"{label}: {identity_rows[-1][2]}", file=sys.stderr)
        timings: dict[tuple[str, str], list[float]] = {}
        compile_args = ("compile", densenet_path(), "--backend", "local", "--no-cache",
                        "-o", str(space / "t.so"))
        for round_ in range(args.rounds + 1):  # round 0 warms the caches of both trees, not counted
            for name, tree in trees.items():
                ir = ir_seconds(tree, args.sizes)
                build = raypass(tree, *compile_args)
                if round_:
                    timings.setdefault(("IR operations (CPU s)", name), []).append(ir)
                    timings.setdefault(("DenseNet-121 light compile (wall s)", name), []).append(build)
                print(f"round {round_} {name}: IR {ir:.2f} s, compile {build:.2f} s", file=sys.stderr)
    notes = machine_notes()
    timing_rows = []
    for what in dict.fromkeys(what for what, _ in timings):
        before, this = timings[(what, "before")], timings[(what, "this")]
        timing_rows.append([what, _spread(before), _spread(this),
                            f"{statistics.median(this) / statistics.median(before):.3f}"])
    text = "\n".join([
        "# Two trees: identical output, same speed",
        "",
        f"Generated by `python -m bench.tree_parity --before {args.before}` ({args.rounds} rounds, "
        f"interleaved; IR operations at sizes {args.sizes}); {notes['machine']}, "
        f"load {notes['load average (1, 5, 15 min)']}.",
        "",
        "## Output (`raypass compile --backend local`: IR after every pass, C, library and weights)",
        "",
        markdown_table(["model", "passes dumped", "before vs this"], identity_rows),
        "",
        "## Time (median, min-max)",
        "",
        markdown_table(["what", "before", "this", "this / before"], timing_rows),
        "",
    ])
    args.output.write_text(text)
    print(text)
    return 0 if all(row[2] == "identical" for row in identity_rows) else 1


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    sys.exit(main())
