"""Quantized models (issue 33): weight-only 4- and 8-bit and dynamically quantized int8
language-model layers against onnxruntime and against raypass's own float32 build.

**Weight-only (MatMulNBits).** The linear layers of a Llama-style decoder layer
(TinyLlama's sizes by default: hidden 2048, MLP 5632, grouped key/value projections of a
quarter of the hidden size; RMS-free: the residual adds, SiLU gating and the seven
projections, whose weights are the layer's whole memory traffic), one row (a decode
step). The float32 model is built here with random weights; ``onnxruntime.quantization``'s
``MatMulNBitsQuantizer`` (asymmetric, blocks of 32) turns it into the 4- and 8-bit models.
**Static QDQ CNNs.** MobileNetV3-like, RegNetX-like and ResNet-50 (``bench/conv_models.py``)
through onnxruntime's documented flow, ``quant_pre_process`` then ``quantize_static`` (QDQ
format, uint8 activations, int8 per-channel weights, calibrated on random batches):
FuseQDQ runs the DequantizeLinear -> Conv/Gemm/Add -> QuantizeLinear groups as integer
ops (the integer GEMM; depthwise and first-layer convolutions exactly on the float
kernels); the float32 build is of the original model (its batch norms folded). The
MobileNetV3-like model also in the QOperator format (QLinearConv and com.microsoft's
QLinear* ops), which imports onto the same integer ops.

**Dynamic int8 (MatMulInteger).** The same layers through ``onnxruntime.quantization``'s
``quantize_dynamic`` (int8 weights, per tensor; the activations quantized to uint8 at run
time by DynamicQuantizeLinear): one row (a decode step) and 32 rows (a prefill chunk).

Per model, interleaved rounds of blocks of back-to-back calls after an idle gap
(``bench.vs_onnxruntime``): onnxruntime on the quantized model, raypass on the quantized
model, raypass on the float32 model; default threads. Also the library's weights file
against the quantized initializers' bytes.

Targets (issue 33): quantized <= 1.0 of onnxruntime's latency, >= 1.3x faster than the
float32 build (AVX2; >= 1.6x with VNNI).

**The AVX2 paths** (``--max-isa avx2``): the same models with raypass's runtime capped at
AVX2 (``RAYPASS_MAX_ISA``: the code a CPU without AVX-512 or VNNI runs) and OpenBLAS's
Haswell kernels, both builds, in a process of their own (both are read when the
libraries load); the float32 / quantized ratio then has the AVX2 target of 1.3.
onnxruntime still runs its own AVX-512/VNNI code here, so its column is not a
comparison with the AVX2 paths and has no verdict.

**7-bit weights** (``--reduce-range``): the int8 models once more, quantized with
``reduce_range`` (weights in [-64, 63]), which onnxruntime's documentation advises for its
u8 x s8 kernels on AVX2 without VNNI: their VPMADDUBSW adds pairs of products in 16 bits
with saturation, so on such a CPU a full-range weight's sums are not exact in
onnxruntime (raypass's are: it widens to 16 bits, half the products an instruction), and
a 7-bit weight's are in both (raypass then takes VPMADDUBSW too). On a CPU without VNNI
(an AMD Zen 3, ``bench/results_quantized_avx2_cpu.md``) both are a comparison.

**Saturating pairs** (``--saturate-pairs``): the full-range int8 models once more, built
with ``relay.SaturatePairs.enabled`` (onnxruntime's u8 x s8 arithmetic without VNNI: pairs
of products saturated to int16), in the same interleaved rounds; its error column is 0 on
a CPU without VNNI, where onnxruntime computes so too.

    python -m bench.quantized [--hidden H] [--mlp M] [--repeats N] [--max-isa avx2] [--reduce-range]
                              [--saturate-pairs] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench import conv_models
from bench.common import HEADLINE_TABLE_HEADER, interleaved, machine_notes, markdown_table, ratio, verdict
from bench.vs_onnxruntime import block, block_calls
from passinfra.build import build
from passinfra.codegen.passes.saturate_pairs import ENABLED_CONFIG as SATURATE_CONFIG
from passinfra.frontend import from_onnx
from passinfra.runtime.module import WEIGHTS_SUFFIX
from passinfra.transform import PassContext

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "bench" / "results_quantized.md"
OUTPUT_AVX2 = ROOT / "bench" / "results_quantized_avx2.md"
# what caps this process at the AVX2 paths: raypass's runtime and OpenBLAS's kernels
AVX2_ENVIRONMENT = {"RAYPASS_MAX_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell"}


# the label of a model quantized with weights of 7 bits (onnxruntime's reduce_range)
SEVEN_BITS = ", 7-bit weights"
# the run of a library built with saturating pairs (--saturate-pairs)
SATURATING = "ours saturating"


def has_vnni() -> bool:
    """Whether this CPU multiplies 8-bit integers with VNNI (AVX-512 or AVX): the issue's
    target over float32 is then 1.6x, else 1.3x."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def decoder_linear_layers(hidden: int = 2048, mlp: int = 5632, rows: int = 1,
                          seed: int = 0) -> onnx.ModelProto:
    """The linear layers of a decoder layer as an ONNX model with float32 weights: q, k, v
    (k and v a quarter of ``hidden``: grouped-query attention), o over q, a residual add,
    gate and up, SiLU(gate) * up, down, a residual add; output ``[rows, hidden * 3/2]``
    (the layer's output with k and v, so no projection is dead code)."""
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, int]) -> str:
        values = rng.standard_normal(shape).astype(np.float32) / np.float32(np.sqrt(shape[0]))
        initializers.append(numpy_helper.from_array(values, name))
        return name

    kv = hidden // 4
    node = helper.make_node
    nodes = [node("MatMul", ["x", weight("q_proj", (hidden, hidden))], ["q"]),
             node("MatMul", ["x", weight("k_proj", (hidden, kv))], ["k"]),
             node("MatMul", ["x", weight("v_proj", (hidden, kv))], ["v"]),
             node("MatMul", ["q", weight("o_proj", (hidden, hidden))], ["o"]),
             node("Add", ["x", "o"], ["h"]),
             node("MatMul", ["h", weight("gate_proj", (hidden, mlp))], ["gate"]),
             node("MatMul", ["h", weight("up_proj", (hidden, mlp))], ["up"]),
             node("Sigmoid", ["gate"], ["gate_sigmoid"]),
             node("Mul", ["gate", "gate_sigmoid"], ["silu"]),
             node("Mul", ["silu", "up"], ["gated"]),
             node("MatMul", ["gated", weight("down_proj", (mlp, hidden))], ["down"]),
             node("Add", ["h", "down"], ["layer"]),
             node("Concat", ["layer", "k", "v"], ["y"], axis=-1)]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "decoder_linear_layers", [value("x", TensorProto.FLOAT, [rows, hidden])],
                              [value("y", TensorProto.FLOAT, [rows, hidden + 2 * kv])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def weight_only(model: onnx.ModelProto, bits: int, block_size: int = 32) -> onnx.ModelProto:
    """``model`` with its MatMuls on constant weights quantized by onnxruntime's
    ``MatMulNBitsQuantizer`` (asymmetric: zero points per block)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the quantizer rewrites the model it is given
    quantizer = MatMulNBitsQuantizer(copy, bits=bits, block_size=block_size, is_symmetric=False)
    quantizer.process()
    quantized = quantizer.model
    return quantized.model if hasattr(quantized, "model") else quantized


def dynamic_int8(model: onnx.ModelProto, tmp: str, reduce_range: bool = False) -> onnx.ModelProto:
    """``model`` through onnxruntime's ``quantize_dynamic`` (int8 weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, target = Path(tmp) / "float32.onnx", Path(tmp) / "dynamic.onnx"
    onnx.save(model, source)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8, reduce_range=reduce_range)
    return onnx.load(target)


def static_qdq(model: onnx.ModelProto, tmp: str, operators: bool = False,
               reduce_range: bool = False) -> onnx.ModelProto:
    """``model`` through onnxruntime's documented flow: ``quant_pre_process`` (shape
    inference and onnxruntime's graph optimizations, which fold BatchNormalization into the
    convolutions), then ``quantize_static`` in the QDQ format (uint8 activations, int8
    per-channel weights), calibrated on four random batches; ``operators``: the QOperator
    format instead (QLinearConv, com.microsoft QLinearAdd/QLinearMul/...)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source = model.graph.input[0]
    shape = tuple(d.dim_value for d in source.type.tensor_type.shape.dim)
    rng = np.random.default_rng(7)
    batches = iter([{source.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    class RandomBatches(CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(batches, None)

    source_path, path, target = (Path(tmp) / name for name in ("float32.onnx", "prepared.onnx", "qdq.onnx"))
    onnx.save(model, source_path)
    quant_pre_process(str(source_path), str(path))
    quant_format = QuantFormat.QOperator if operators else QuantFormat.QDQ
    quantize_static(path, target, RandomBatches(), quant_format=quant_format,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                    reduce_range=reduce_range)
    return onnx.load(target)


def quantized_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the quantized weights' initializers (codes, scales, zero points)."""
    return sum(numpy_helper.to_array(init).nbytes for init in model.graph.initializer)


def _library(model: onnx.ModelProto, cache_dir: str, saturate: bool = False) -> Any:
    config = {"codegen.cache_dir": cache_dir, **({SATURATE_CONFIG: True} if saturate else {})}
    with PassContext(opt_level=3, config=config):
        return build(from_onnx(model))


def _error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-6))


def compare(label: str, float_model: onnx.ModelProto, quantized: onnx.ModelProto, repeats: int,
            cache_dir: str, out_dir: str, saturate: bool = False) -> dict[str, Any]:
    """The model's runs interleaved: onnxruntime, ours, ours float32 and (``saturate``)
    ours built with saturating pairs (relay.SaturatePairs.enabled)."""
    import onnxruntime as ort

    source = float_model.graph.input[0]
    shape = tuple(d.dim_value for d in source.type.tensor_type.shape.dim)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ours, ours_float = _library(quantized, cache_dir), _library(float_model, cache_dir)
    session = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {source.name: x})[0]
    library = Path(out_dir) / f"{len(os.listdir(out_dir))}.so"
    ours.export_library(str(library))
    weights = Path(str(library) + WEIGHTS_SUFFIX).stat().st_size
    runs = {"onnxruntime": lambda: session.run(None, {source.name: x}), "ours": lambda: ours(x),
            "ours float32": lambda: ours_float(x)}
    errors = {"ours": _error(ours(x), expected)}
    if saturate:
        saturating = _library(quantized, cache_dir, saturate=True)
        runs[SATURATING] = lambda: saturating(x)
        errors[SATURATING] = _error(saturating(x), expected)
    calls = block_calls(runs["onnxruntime"])
    samples = interleaved({name: block(run, calls) for name, run in runs.items()}, repeats)
    return {"label": label, "samples": samples, "errors": errors, "weights": weights,
            "initializers": quantized_bytes(quantized)}


def _nodes(model: onnx.ModelProto) -> set[str]:
    return {node.op_type for node in model.graph.node}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quantized", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--mlp", type=int, default=5632)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--max-isa", choices=["avx2"], default=None,
                        help="cap raypass (and OpenBLAS) at the AVX2 paths")
    parser.add_argument("--reduce-range", action="store_true",
                        help="also the int8 models with weights of 7 bits (onnxruntime's reduce_range)")
    parser.add_argument("--saturate-pairs", action="store_true",
                        help="also build the full-range int8 models with saturating pairs "
                             "(relay.SaturatePairs.enabled: onnxruntime's arithmetic without VNNI)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    avx2 = args.max_isa == "avx2"
    if avx2 and any(os.environ.get(k) != v for k, v in AVX2_ENVIRONMENT.items()):
        # both are read when the libraries load: a process of their own
        command = [sys.executable, "-m", "bench.quantized", *(argv if argv is not None else sys.argv[1:])]
        return subprocess.call(command, env={**os.environ, **AVX2_ENVIRONMENT}, cwd=ROOT)
    output = args.output or str(OUTPUT_AVX2 if avx2 else OUTPUT)
    float_target = 1.3 if avx2 or not has_vnni() else 1.6
    size = f"hidden {args.hidden}, MLP {args.mlp}"
    results = []
    with tempfile.TemporaryDirectory(prefix="raypass-bench-quantized-") as tmp:
        cache = os.path.join(tmp, "cache")
        out = os.path.join(tmp, "libraries")
        os.makedirs(out)
        model = decoder_linear_layers(args.hidden, args.mlp)
        for bits in (4, 8):
            print(f"weight-only {bits}-bit, one row ...", flush=True)
            quantized = weight_only(model, bits)
            assert "MatMulNBits" in _nodes(quantized) and "MatMul" not in _nodes(quantized), "all quantized"
            label = f"{bits}-bit weight-only, one row"
            results.append(compare(label, model, quantized, args.repeats, cache, out))
        ranges = (False, True) if args.reduce_range else (False,)
        for rows, seven in ((rows, seven) for rows in (1, 32) for seven in ranges):
            print(f"dynamic int8, {rows} row(s) ...", flush=True)
            model = decoder_linear_layers(args.hidden, args.mlp, rows)
            quantized = dynamic_int8(model, tmp, reduce_range=seven)
            assert "MatMulInteger" in _nodes(quantized) and "MatMul" not in _nodes(quantized), "all quantized"
            label = ("dynamic int8, one row" if rows == 1 else f"dynamic int8, {rows} rows") + (
                SEVEN_BITS if seven else "")
            results.append(compare(label, model, quantized, args.repeats, cache, out,
                                   args.saturate_pairs and not seven))
        cnns = (("MobileNetV3-like", conv_models.mobilenet), ("RegNetX-like", conv_models.regnet),
                ("ResNet-50", conv_models.resnet50))
        for (name, builder), seven in ((cnn, seven) for cnn in cnns for seven in ranges):
            print(f"static QDQ {name} ...", flush=True)
            model = builder()
            quantized = static_qdq(model, tmp, reduce_range=seven)
            assert "QuantizeLinear" in _nodes(quantized), "quantized"
            label = f"{name} QDQ (static, per-channel)" + (SEVEN_BITS if seven else "")
            results.append(compare(label, model, quantized, args.repeats, cache, out,
                                   args.saturate_pairs and not seven))
        print("static QOperator MobileNetV3-like ...", flush=True)
        model = conv_models.mobilenet()
        quantized = static_qdq(model, tmp, operators=True)
        assert "QLinearConv" in _nodes(quantized) and "Conv" not in _nodes(quantized), "QOperator format"
        results.append(compare("MobileNetV3-like QOperator (static, per-channel)", model, quantized,
                               args.repeats, cache, out, args.saturate_pairs))
    table, headline = [], []
    for r in results:
        s = r["samples"]
        vs_ort, vs_float = ratio(s["ours"], s["onnxruntime"]), ratio(s["ours float32"], s["ours"])
        table.append([r["label"], f"{s['onnxruntime'].median * 1e3:.3f}",
                      f"{s['ours'].median * 1e3:.3f}", f"{s['ours float32'].median * 1e3:.3f}",
                      f"{vs_ort.median:.2f} [{vs_ort.low:.2f}-{vs_ort.high:.2f}]",
                      f"{vs_float.median:.2f} [{vs_float.low:.2f}-{vs_float.high:.2f}]",
                      f"{r['weights'] / r['initializers']:.3f}", f"{r['errors']['ours']:.1e}"])
        if args.saturate_pairs:
            saturating = ratio(s[SATURATING], s["onnxruntime"]) if SATURATING in s else None
            table[-1] += ([f"{s[SATURATING].median * 1e3:.3f}",
                           f"{saturating.median:.2f} [{saturating.low:.2f}-{saturating.high:.2f}]",
                           f"{r['errors'][SATURATING]:.1e}"] if saturating else ["-", "-", "-"])
        if not avx2:
            headline.append([f"{r['label']}: ours / onnxruntime", f"{vs_ort.median:.2f}",
                             f"{vs_ort.low:.2f}-{vs_ort.high:.2f}", "<= 1.0",
                             verdict(vs_ort.median, 1.0, False)])
            if SATURATING in s:
                headline.append([f"{r['label']}, saturating pairs: ours / onnxruntime",
                                 f"{saturating.median:.2f}", f"{saturating.low:.2f}-{saturating.high:.2f}",
                                 "<= 1.0", verdict(saturating.median, 1.0, False)])
        headline.append([f"{r['label']}: float32 build / quantized build",
                         f"{vs_float.median:.2f}", f"{vs_float.low:.2f}-{vs_float.high:.2f}",
                         f">= {float_target}", verdict(vs_float.median, float_target, True)])
    notes = machine_notes()
    flag = ((" --max-isa avx2" if avx2 else "") + (" --reduce-range" if args.reduce_range else "")
            + (" --saturate-pairs" if args.saturate_pairs else ""))
    scope = (["With raypass's runtime capped at AVX2 and OpenBLAS's Haswell kernels, both builds "
              "(onnxruntime runs its own AVX-512/VNNI code: its column is not a comparison)."] if avx2
             else [f"This CPU {'has' if has_vnni() else 'has no'} VNNI: the target over float32 is "
                   f"{float_target}x."])
    text = "\n".join([
        "# Quantized models (issue 33)" + (", the AVX2 paths" if avx2 else ""), "",
        f"Generated by `python -m bench.quantized --hidden {args.hidden} --mlp {args.mlp} --repeats "
        f"{args.repeats}{flag}`; " + ", ".join(f"{k} {v}" for k, v in notes.items()) + ".", "",
        *scope, "",
        f"## Decoder linear layers ({size})", "",
        "Milliseconds per call, medians of interleaved rounds (blocks of back-to-back calls after an idle "
        "gap), default threads; ratios of medians [quartile range]. Weights: the library's weights file "
        "over the quantized model's initializer bytes. Error: max |ours - onnxruntime| over max "
        "|onnxruntime|.",
        "",
        markdown_table(["quantization", "onnxruntime", "ours", "ours float32", "ours / onnxruntime",
                        "float32 / ours", "weights / initializers", "error",
                        *(["ours, saturating pairs", "saturating / onnxruntime", "error, saturating"]
                          if args.saturate_pairs else [])], table), "",
        markdown_table(HEADLINE_TABLE_HEADER, headline), ""])
    Path(output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
