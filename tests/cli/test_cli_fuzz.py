"""Fuzzing ``raypass compile`` with broken models: random mutations of a valid ONNX file
and of a valid text-IR file must end in exit 0 (the mutant is still a model) or exit 2
(one ``raypass: error:`` line), never a traceback, never a hang.

Mutants are derived from seeded NumPy generators, one seed per case, so a failing case is
reproduced by its seed alone (the assertion message names it). Both byte-level mutations
(what a truncated download or a bad disk gives) and structure-aware ones (a mutated
protobuf field, a changed token: what gets past the decoder and the lexer) are used; the
second kind is what reaches the importer, the parser and the type checker.

The bulk runs in-process through ``raypass_cli.main.main`` under a per-case time bound; a
handful of the same mutants also run as real processes.
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from passinfra.frontend import zoo
from passinfra.frontend.onnx_ops.registry import supported_op_types

ONNX_CASES = 1000
TEXT_CASES = 1000
CASE_SECONDS = 20  # per in-process case; a hang fails the test instead of stalling it
PROCESS_CASES = 4  # per kind, as real processes

# values that sit on the edges of what a field can hold
EDGE_INTS = (-(2**63), -(2**31), -2, -1, 0, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**40, 2**62)
EDGE_NUMBERS = ("0", "-1", "1", "3", "65", "2147483648", "99999999999999999999", "1e308", "0.5", "-0")


# ---------------------------------------------------------------------------- seed models


def seed_onnx_models() -> list[onnx.ModelProto]:
    """Two tiny zoo models: an MLP (Gemm, Relu, Softmax) and a transformer (a shape
    subgraph, Split, Reshape, Transpose, MatMul, LayerNormalization, Erf, Where...)."""
    return [
        zoo.mlp(batch=1, in_features=4, hidden=4, layers=1, classes=2),
        zoo.transformer(layers=1, hidden=8, heads=2, seq=4, batch=1, vocab=16),
    ]


SEED_TEXT_IR = """\
def @main(%x: Tensor[(2, 4), float32], %y: Tensor[(4, 3), float32]) {
  %0 = nn.dense(%x, meta[Constant][0]);
  %1 = nn.bias_add(%0, [0.5f, -1.0f, 2.0f], axis=1);
  %2 = nn.relu(%1);
  %3 = matmul(%x, %y);
  %4 = add(%2, %3);
  %5 = transpose(%4, axes=(1, 0));
  %6 = reshape(%5, newshape=(2, 3));
  let %t = (%4, %6);
  %7 = concatenate((%t.0, %t.1), axis=0);
  %8 = sum(%7, axis=(1,), keepdims=True);
  %9 = nn.softmax(multiply(%7, %8), axis=-1);
  %10 = where(less(%9, 0.25f), mean(%9, axis=(0,), keepdims=False), sqrt(abs(%9)));
  (%9, %10, cast(max(exp(%9)), dtype="int32"))
}

metadata {
  meta[Constant][0]: Tensor[(3, 4), float32] = \
"bL8APn9GB7698iM/39XWPaEhCb/9Irk+eemmP+Zzcj/+JzS/Vfmhv+qOH79uRSk9";
}
"""


# -------------------------------------------------------------------------- byte mutations


def mutate_bytes(rng: np.random.Generator, data: bytes) -> bytes:
    """One to three edits: overwrite, flip a bit, truncate, delete, insert, duplicate."""
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(0, max(1, len(out))))
        kind = int(rng.integers(0, 6))
        if kind == 0 and out:
            out[i] = int(rng.integers(0, 256))
        elif kind == 1 and out:
            out[i] ^= 1 << int(rng.integers(0, 8))
        elif kind == 2:
            del out[i:]
        elif kind == 3:
            del out[i : i + int(rng.integers(1, 16))]
        elif kind == 4:
            out[i:i] = rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8).tobytes()
        else:
            out[i:i] = out[i : i + int(rng.integers(1, 32))]
    return bytes(out)


# ------------------------------------------------------------------ ONNX field mutations


def _pick(rng: np.random.Generator, items: list) -> object:
    return items[int(rng.integers(0, len(items)))]


def _value_names(model: onnx.ModelProto) -> list[str]:
    graph = model.graph
    names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
    return names + [o for node in graph.node for o in node.output] + ["", "no_such_value"]


def _mutate_node(rng: np.random.Generator, model: onnx.ModelProto) -> None:
    nodes = model.graph.node
    node = _pick(rng, list(nodes))
    kind = int(rng.integers(0, 6))
    if kind == 0:
        node.op_type = str(_pick(rng, [*supported_op_types(), "NoSuchOp", ""]))
    elif kind == 1 and node.input:
        node.input[int(rng.integers(0, len(node.input)))] = str(_pick(rng, _value_names(model)))
    elif kind == 2:
        node.input.append(str(_pick(rng, _value_names(model))))
    elif kind == 3 and node.output:
        node.output[int(rng.integers(0, len(node.output)))] = str(_pick(rng, _value_names(model)))
    elif kind == 4 and len(nodes) > 1:
        i, j = (int(k) for k in rng.choice(len(nodes), 2, replace=False))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)
    else:
        del nodes[int(rng.integers(0, len(nodes)))]


def _mutate_attribute(rng: np.random.Generator, model: onnx.ModelProto) -> None:
    node = _pick(rng, [n for n in model.graph.node if n.attribute] or list(model.graph.node))
    if not node.attribute or rng.integers(0, 4) == 0:
        name = str(_pick(rng, ["axis", "perm", "transB", "alpha", "to", "epsilon", "upper", "bogus"]))
        node.attribute.append(onnx.helper.make_attribute(name, int(_pick(rng, list(EDGE_INTS)))))
        return
    attr = _pick(rng, list(node.attribute))
    kind = int(rng.integers(0, 5))
    if kind == 0:
        attr.type = int(rng.integers(0, 15))  # possibly disagreeing with the field set
    elif kind == 1:
        attr.i = int(_pick(rng, list(EDGE_INTS)))
    elif kind == 2:
        attr.f = float(_pick(rng, [0.0, -1.0, 1e30, float("nan"), float("inf")]))
    elif kind == 3:
        attr.ints[:] = [int(_pick(rng, list(EDGE_INTS))) for _ in range(int(rng.integers(0, 5)))]
    else:
        node.attribute.remove(attr)


def _mutate_tensor_types(rng: np.random.Generator, model: onnx.ModelProto) -> None:
    graph = model.graph
    value_info = _pick(rng, [*graph.input, *graph.output])
    tensor_type = value_info.type.tensor_type
    kind = int(rng.integers(0, 4))
    if kind == 0:
        tensor_type.elem_type = int(rng.integers(0, 26))
    elif kind == 1 and tensor_type.shape.dim:
        dim = _pick(rng, list(tensor_type.shape.dim))
        dim.dim_value = int(_pick(rng, list(EDGE_INTS)))
    elif kind == 2 and tensor_type.shape.dim:
        dim = _pick(rng, list(tensor_type.shape.dim))
        dim.dim_param = "n"
    else:
        tensor_type.shape.dim.add().dim_value = int(_pick(rng, [1, 2, 0, 2**31]))


def _mutate_initializer(rng: np.random.Generator, model: onnx.ModelProto) -> None:
    init = _pick(rng, list(model.graph.initializer))
    kind = int(rng.integers(0, 4))
    if kind == 0:
        init.data_type = int(rng.integers(0, 26))
    elif kind == 1 and init.dims:
        init.dims[int(rng.integers(0, len(init.dims)))] = int(_pick(rng, list(EDGE_INTS)))
    elif kind == 2:
        init.raw_data = init.raw_data[: int(rng.integers(0, len(init.raw_data) + 1))]
    else:
        init.dims.append(int(_pick(rng, [0, 1, 3])))


def _mutate_model_fields(rng: np.random.Generator, model: onnx.ModelProto) -> None:
    kind = int(rng.integers(0, 4))
    if kind == 0:
        model.opset_import[0].version = int(_pick(rng, [1, 6, 11, 13, 16, 18, 21, 99, -1]))
    elif kind == 1:
        model.ir_version = int(_pick(rng, [0, 1, 3, 99, -1]))
    elif kind == 2:
        model.graph.output[0].name = str(_pick(rng, _value_names(model)))
    else:
        del model.graph.input[:]


FIELD_MUTATIONS: list[Callable[[np.random.Generator, onnx.ModelProto], None]] = [
    _mutate_node,
    _mutate_attribute,
    _mutate_tensor_types,
    _mutate_initializer,
    _mutate_model_fields,
]


def onnx_mutant(seed: int, models: list[onnx.ModelProto]) -> bytes:
    """Case ``seed``: a mutated copy of one of ``models``, serialized. A third of the cases
    are byte-level edits; the rest edit one to three protobuf fields."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto()
    model.CopyFrom(models[seed % len(models)])
    if rng.integers(0, 3) == 0:
        return mutate_bytes(rng, model.SerializeToString())
    for _ in range(int(rng.integers(1, 4))):
        _pick(rng, FIELD_MUTATIONS)(rng, model)
    return model.SerializeToString()


# ------------------------------------------------------------------ text-IR token mutations

_TOKEN = re.compile(r"%\w+|@\w+|[A-Za-z_][\w.]*|-?\d+(?:\.\d*)?(?:e[+-]?\d+)?[a-z0-9]*|\S")
_NUMBER = re.compile(r"-?[\d.]+(?:e[+-]?\d+)?([a-z]\w*)?")
# the ops of the public contract (DESIGN.md); fixed here, not read from the registry, which
# also holds whatever test-private ops other test modules registered: the mutants of a seed
# must not depend on which tests ran first
OP_WORDS = (
    "add", "subtract", "multiply", "divide", "negative", "exp", "log", "sqrt", "abs", "tanh", "sigmoid",
    "maximum", "minimum", "power", "reshape", "transpose", "concatenate", "split", "squeeze",
    "expand_dims", "sum", "mean", "max", "matmul", "zeros", "ones", "full", "cast", "where", "take",
    "less", "nn.conv2d", "nn.dense", "nn.bias_add", "nn.relu", "nn.softmax", "nn.batch_norm",
    "nn.dropout", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.layer_norm", "nn.gelu",
)
DTYPE_WORDS = ("float32", "float64", "int32", "int64", "bool", "float16", "Tensor")
VAR_WORDS = ("%x", "%y", "%t", "%0", "%9", "%99", "@main", "@f", "meta[Constant][1]")
KEYWORDS = ("let", "if", "fn", "def", "else", "free_var", "None", "True", "axis", "=", ";", "(", "}")


def _replacement(rng: np.random.Generator, word: str, ops: list[str]) -> str:
    """A token of the same kind as ``word`` (numbers keep their dtype suffix), so that
    many mutants still parse and reach the type checker and the passes."""
    number = _NUMBER.fullmatch(word)
    if number:
        return str(_pick(rng, list(EDGE_NUMBERS))) + (number.group(1) or "")
    if word in ops:
        return str(_pick(rng, ops))
    if word in DTYPE_WORDS:
        return str(_pick(rng, list(DTYPE_WORDS)))
    if word[0] in "%@":
        return str(_pick(rng, list(VAR_WORDS)))
    return str(_pick(rng, list(KEYWORDS)))


def _is_meaningful(word: str, ops: list[str]) -> bool:
    return bool(_NUMBER.fullmatch(word)) or word in ops or word in DTYPE_WORDS or word[0] in "%@"


def _edit_lines(rng: np.random.Generator, text: str) -> str:
    lines = text.splitlines(keepends=True)
    i, j = int(rng.integers(0, len(lines))), int(rng.integers(0, len(lines)))
    edit = int(rng.integers(0, 3))
    if edit == 0:
        del lines[i]
    elif edit == 1:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines.insert(j, lines[i])
    return "".join(lines)


def _edit_token(rng: np.random.Generator, text: str, ops: list[str]) -> str:
    # the program, not the metadata: an edited base64 payload only tests the decoder
    body_end = text.find("\nmetadata")
    tokens = list(_TOKEN.finditer(text, 0, body_end if body_end >= 0 else len(text)))
    # mostly a number, op, dtype or variable: edits of those tend to still parse
    meaningful = [t for t in tokens if _is_meaningful(t.group(), ops)]
    if meaningful and rng.integers(0, 10) < 8:
        tokens = meaningful
    if not tokens:
        return text
    token = tokens[int(rng.integers(0, len(tokens)))]
    word = token.group()
    edit = int(rng.integers(0, 10))
    new = "" if edit == 0 else word + word if edit == 1 else _replacement(rng, word, ops)
    return text[: token.start()] + new + text[token.end() :]


def text_mutant(seed: int, text: str = SEED_TEXT_IR) -> str:
    """Case ``seed``: one to three edits of ``text``. Mostly a token replaced by one of
    its kind (a number, an op, a dtype, a variable), deleted or doubled; sometimes lines
    dropped, swapped or duplicated, the text truncated, or raw bytes changed."""
    rng = np.random.default_rng(seed)
    ops = list(OP_WORDS)
    for _ in range(int(rng.integers(1, 4))):
        if not text:
            break
        kind = int(rng.integers(0, 20))
        if kind < 16:
            text = _edit_token(rng, text, ops)
        elif kind < 18:
            text = _edit_lines(rng, text)
        elif kind < 19:
            text = text[: int(rng.integers(0, len(text)))]
        else:
            # raw bytes stay raw (surrogateescape): a mutant may well be no UTF-8 at all
            raw = mutate_bytes(rng, text.encode("utf-8", "surrogateescape"))
            text = raw.decode("utf-8", "surrogateescape")
    return text


def text_file(seed: int) -> bytes:
    """The bytes of text mutant ``seed``, as written to the model file."""
    return text_mutant(seed).encode("utf-8", "surrogateescape")


# ------------------------------------------------------------------------------ running


class CaseTimeout(Exception):
    """A case ran past CASE_SECONDS (raised by the alarm in the main thread)."""


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_inprocess(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of ``raypass *argv`` through the CLI's main()."""
    from raypass_cli import main as cli

    err, out = io.StringIO(), io.StringIO()
    with time_bound(CASE_SECONDS), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = cli.main(argv)
    return status, err.getvalue()


def check_outcome(label: str, status: int, stderr: str, model: Path, output: Path) -> None:
    """Exit 0, or exit 2 with one ``raypass: error:`` line and nothing written."""
    assert "Traceback" not in stderr, f"{label}: traceback\n{stderr[-3000:]}"
    assert status in (0, 2), f"{label}: exit {status}\n{stderr[-3000:]}"
    if status == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("raypass: error: "), f"{label}: {stderr[-3000:]}"
        written = sorted(p.name for p in output.parent.glob(output.name + "*"))
        assert written == [], f"{label}: a failed compile wrote {written}"
    else:
        assert output.is_file(), f"{label}: exit 0 without {output.name}"


def compile_args(model: Path, output: Path, cache: Path) -> list[str]:
    return ["compile", str(model), "-o", str(output), "--backend", "local", "--cache-dir", str(cache)]


def fuzz_inprocess(tmp_path: Path, suffix: str, cases: Iterator[tuple[int, bytes]]) -> dict[int, int]:
    """Run every (seed, file bytes) case; returns how many cases ended with each status."""
    cache = tmp_path / "kernel-cache"  # shared: most valid mutants reuse the same kernels
    counts = {0: 0, 2: 0}
    for seed, data in cases:
        model, output = tmp_path / f"case{seed}{suffix}", tmp_path / "out" / f"case{seed}.so"
        output.parent.mkdir(exist_ok=True)
        model.write_bytes(data)
        label = f"{suffix} mutant seed={seed}"
        try:
            status, stderr = run_inprocess(compile_args(model, output, cache))
        except CaseTimeout:
            pytest.fail(f"{label}: no result within {CASE_SECONDS}s")
        check_outcome(label, status, stderr, model, output)
        counts[status] += 1
        model.unlink()
        for path in output.parent.iterdir():
            path.unlink()
    return counts


# -------------------------------------------------------------------------------- tests


def test_onnx_mutants_compile_or_fail_cleanly(tmp_path):
    models = seed_onnx_models()
    counts = fuzz_inprocess(tmp_path, ".onnx", ((s, onnx_mutant(s, models)) for s in range(ONNX_CASES)))
    assert sum(counts.values()) == ONNX_CASES
    # the mutants exercise both outcomes: some stay valid models, most do not
    assert counts[0] > 0 and counts[2] > ONNX_CASES // 2, counts


def test_text_ir_mutants_compile_or_fail_cleanly(tmp_path):
    cases = ((s, text_file(s)) for s in range(TEXT_CASES))
    counts = fuzz_inprocess(tmp_path, ".txt", cases)
    assert sum(counts.values()) == TEXT_CASES
    assert counts[0] > 0 and counts[2] > TEXT_CASES // 2, counts


def test_mutants_as_real_processes(raypass, tmp_path):
    models = seed_onnx_models()
    # the unmutated models first: the control that exit 0 is reachable as run here
    cases: list[tuple[object, str, bytes]] = [
        ("original", ".onnx", models[0].SerializeToString()),
        ("original", ".txt", SEED_TEXT_IR.encode()),
    ]
    cases += [(s, ".onnx", onnx_mutant(s, models)) for s in range(PROCESS_CASES)]
    cases += [(s, ".txt", text_file(s)) for s in range(PROCESS_CASES)]
    statuses = []
    for seed, suffix, data in cases:
        model, output = tmp_path / f"case{seed}{suffix}", tmp_path / f"case{seed}{suffix}.so"
        model.write_bytes(data)
        result = raypass(*compile_args(model, output, tmp_path / "kernel-cache"), timeout=120)
        check_outcome(f"{suffix} mutant seed={seed}", result.returncode, result.stderr, model, output)
        statuses.append(result.returncode)
    assert statuses[:2] == [0, 0]
