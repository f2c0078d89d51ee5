"""Issues 17 and 29, weight size: peak memory of ``raypass compile`` and ``raypass run`` against the weights.

    python -m bench.weights_memory [--quick] [--repeats N] [--before REF|none] [--after REF|checkout]
                                   [--large-layers N] [--memory-budget GIB] [--output FILE]

What is measured, each in whole processes:

* ``raypass compile MODEL.onnx -o LIB --backend local --no-cache --timing`` and then
  ``raypass run LIB --input input=TOKENS.npy --output DIR``: each process tree's peak
  resident set size as the operating system reports it, the ``ru_maxrss`` that
  ``os.wait4`` returns for the process (the largest RSS the process, or a C compiler it
  waited for, ever had; the Python process is by far the largest; the same number as
  ``/usr/bin/time -v``'s "Maximum resident set size"), as a multiple of the model's weight
  bytes (the sum of its initializers' sizes). The verdicts judge that number; next to it,
  the harness's own peak: ``ru_maxrss`` or the largest sample below, when that is larger.
  RSS counts file-backed pages a process has mapped and touched as well as anonymous
  memory: a weight read through a memory map of the model file or of the library's weights
  file counts once, the page cache it shares with other processes included. While a process
  runs, /proc/PID/status is sampled every 50 ms, which splits the peak into anonymous
  and file-backed pages (RssAnon, RssFile) at the sample with the largest RSS.
* the build time the compile reports (``built in X s``) and the wall time of its link
  passes (PlanMemory, HostCodegen, LinkLibrary) from its ``--timing`` table, as shares of it.
* the output of each run against onnxruntime's on the same tokens (onnxruntime runs once
  per model, in a process of its own, measured the same way).

Models (``zoo:transformer``, GPT-style decoders, float32 weights drawn by the zoo's
seeded generator; the input is 16 int64 token ids):

* ``external``: ``zoo:transformer?layers=24&hidden=1024`` (1.2 GB of weights) saved with
  external data (one data file next to the model; tensors of 1 KiB and more in it, each
  on a page of its own);
* ``saved``: the same model saved as issue 29's user saved it, by onnx's own writer
  (:data:`SAVE_CALL`: tensors back to back in one data file onnx names); issue 29 measured
  2,440 MiB = 2.11x for it with ``/usr/bin/time -v``, against this report's 1.07x of
  then, which was measured before PanelWeights (commit 77fc792) converted the matmul
  weights into panels: the conversion read every weight through the map of the data
  file, so the model's pages stayed resident next to the panels (2x). Both external
  models show it alike; ``passinfra.file_pages`` drops those pages once read;
* ``gpt2``: a GPT-2-style decoder of the same size (:func:`gpt2_model`: biases, the MLP
  as ``Gemm(transB=1)``, an LM head tied to the token embedding), saved as ``saved`` is;
  its weights take the importer's fold (the tied head's transpose) and
  DeduplicateFilters's check (the dense weights), which read weights whole too;
* ``inline``: the same model saved as one protobuf file (weights in ``raw_data``);
* ``large``: ``layers=56&hidden=1024`` (2.8 GB of weights; ``--large-layers`` changes
  it), saved with external data. The zoo refuses models whose weights exceed an ONNX
  file's 2 GiB, so its builder is run with that check lifted and each initializer
  streamed into the data file as it is drawn (:func:`write_external_model`): the same
  graph and the same values the zoo builds below the limit, written without holding
  the weights in memory.

``--quick`` (for tests/bench/test_bench_weights_memory.py) uses the same five kinds at
a few megabytes (hidden 128, 2 and 4 layers), one round, no warm-up, and only the live
checkout; ``--models`` picks some of them.

Trees: "before" (default: commit 6257a14, the tree before the weight-handling commits,
``git archive``-d into the harness's temp directory) and "after" (default: ``git
archive HEAD``; ``--after checkout`` runs the live checkout). Every process runs with
``PYTHONPATH`` set to its tree. Runs are interleaved: round after round, every model and
tree once (the trees' order alternating), after one warm-up round that is reported but
not counted (it reads the model files into the page cache). Medians and ranges (min-max)
over the counted rounds.

Memory safety (this machine has 24 GB, shared): every child is watched, and killed
(its process group) when its RSS exceeds the budget (``--memory-budget``, default the
smaller of 16 GiB and the memory available at the start less 4 GiB); every child also
runs with ``RLIMIT_AS`` (its address space) at the budget plus twice the model's file
bytes (the maps of the model and of the library's weights file) plus 8 GiB of slack,
as a backstop. A killed or failed run is reported as such, not as a number.

Finally, where the memory goes: one compile per tree and model in-process
(``--timeline-worker``, mirroring ``raypass compile``: import, ``from_onnx``, the build's
passes, ``export_library``), with an instrument that records RSS (anonymous, file) after
each pass and the peak during it (/proc/self/clear_refs resets the high-water mark).

Writes bench/results_weights_memory.md (``--output``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# How a worker mode runs: this file, by path, through runpy. The measured tree's packages
# must be the ones it imports (PYTHONPATH and the working directory are that tree), so it
# is not `-m bench.weights_memory` (the tree's own bench, maybe older or absent), and not
# `python FILE`, which puts bench/ first on the path, where bench/scheduler.py and the like
# would shadow the tree's packages; runpy runs a file without adding its directory.
_RUN_FILE = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"

DEFAULT_OUTPUT = ROOT / "bench" / "results_weights_memory.md"
BEFORE_COMMIT = "6257a14"
TARGETS = {"compile": 1.5, "run": 1.3}  # the issue's, for the external-data model
LINK_PASSES = ("PlanMemory", "HostCodegen", "LinkLibrary")
EXTERNAL_THRESHOLD = 1024  # tensors this big or bigger go to the data file (onnx's default)
DATA_ALIGNMENT = 4096  # each tensor starts on a page in the data file, so it maps cleanly
SEQ, VOCAB = 16, 128  # the zoo transformer's defaults: the input is (1, 16) token ids
GPT2_VOCAB = 2048  # the GPT-2-style model's vocabulary (its tokens are drawn below VOCAB too)
# onnxruntime vs the compiled library, float32 through every layer: what the issue reports
# for real models is 1e-5; deep random-weight decoders accumulate more, so 1e-4
RTOL, ATOL = 1e-4, 1e-4
SAMPLE_SECONDS = 0.05
PROCESS_TIMEOUT_S = 3600.0
GIB = 1 << 30
# how issue 29's user saved the decoder (no location: onnx names the data file itself)
SAVE_CALL = (
    "onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, "
    "size_threshold=1024)"
)
_JSON_MARK = "WEIGHTS_MEMORY_JSON:"
_CLI = "from raypass_cli.main import cli; cli()"  # the `raypass` command's own entry
BUILT_LINE = re.compile(r"built in ([0-9.]+)s on the")


@dataclass(frozen=True)
class ModelSpec:
    key: str  # "external", "inline", "large"
    layers: int
    hidden: int
    storage: str  # "external", "saved" (external data as onnx.save_model writes it) or "inline"

    @property
    def zoo(self) -> str:
        if self.storage == "gpt2":
            return f"GPT-2-style decoder, layers={self.layers}, hidden={self.hidden}, vocab={GPT2_VOCAB}"
        return f"zoo:transformer?layers={self.layers}&hidden={self.hidden}"

    @property
    def label(self) -> str:
        where = {
            "external": "external data (page-aligned, written as drawn)",
            "saved": f"external data as `{SAVE_CALL}` writes it (issue 29)",
            "gpt2": "external data as `onnx.save_model` writes it (as `saved`)",
        }.get(self.storage, "inline (one protobuf file)")
        return f"{self.key}: `{self.zoo}`, {where}"

    @property
    def has_target(self) -> bool:
        """The issue's targets are for models whose weights are external data."""
        return self.storage in ("external", "saved", "gpt2")


MODEL_KEYS = ("external", "saved", "gpt2", "inline", "large")


def model_specs(quick: bool, large_layers: int, keys: Sequence[str] = MODEL_KEYS) -> list[ModelSpec]:
    hidden = 128 if quick else 1024
    layers = 2 if quick else 24
    specs = [
        ModelSpec("external", layers, hidden, "external"),
        ModelSpec("saved", layers, hidden, "saved"),
        ModelSpec("gpt2", layers, hidden, "gpt2"),
        ModelSpec("inline", layers, hidden, "inline"),
        ModelSpec("large", 4 if quick else large_layers, hidden, "external"),
    ]
    return [spec for spec in specs if spec.key in keys]


# ----- writing the models ----------------------------------------------------------------------
def _chdir(path: Path) -> Any:
    """A context manager entering ``path`` (contextlib.chdir is Python 3.11+)."""
    import contextlib

    @contextlib.contextmanager
    def entered() -> Any:
        old = os.getcwd()
        os.chdir(path)
        try:
            yield
        finally:
            os.chdir(old)

    return entered()


def write_external_model(directory: Path, layers: int, hidden: int) -> dict[str, Any]:
    """``zoo:transformer?layers=&hidden=`` as ``directory/model.onnx`` + ``model.data``,
    each initializer of ``EXTERNAL_THRESHOLD`` bytes or more written to the data file the
    moment the zoo's builder draws it (page-aligned), so no size needs the weights in memory.

    The zoo's builder is run as it is, with two of its module globals replaced for the
    call: the weight limit (an ONNX file's 2 GiB, which external data does not have) and
    its graph builder class, by a subclass that stores initializers as external data."""
    import onnx
    from onnx import TensorProto

    from passinfra.frontend.zoo import onnx_models

    directory.mkdir(parents=True, exist_ok=True)
    data_name = "model.data"
    counts = {"weight_bytes": 0, "external_tensors": 0}

    class StreamingBuilder(onnx_models._GraphBuilder):  # noqa: SLF001 - the zoo's own builder
        handle: Any = None

        def _add(self, prefix: str, array: Any) -> str:
            import numpy as np

            array = np.asarray(array)
            counts["weight_bytes"] += array.nbytes
            if array.nbytes < EXTERNAL_THRESHOLD:
                return super()._add(prefix, array)
            name = self.fresh(prefix)
            handle = StreamingBuilder.handle
            offset = -(-handle.tell() // DATA_ALIGNMENT) * DATA_ALIGNMENT
            handle.write(bytes(offset - handle.tell()))
            handle.write(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes())
            tensor = TensorProto(name=name, data_type=onnx.helper.np_dtype_to_tensor_dtype(array.dtype))
            tensor.dims.extend(array.shape)
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", offset), ("length", array.nbytes)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            self.initializers.append(tensor)
            counts["external_tensors"] += 1
            return name

    saved = onnx_models._GraphBuilder, onnx_models.MAX_WEIGHT_BYTES  # noqa: SLF001
    # the builder checks the model (onnx.checker), which opens external data relative to
    # the working directory
    with open(directory / data_name, "wb") as handle, _chdir(directory):
        StreamingBuilder.handle = handle
        onnx_models._GraphBuilder, onnx_models.MAX_WEIGHT_BYTES = StreamingBuilder, 1 << 62  # noqa: SLF001
        try:
            model = onnx_models.transformer(layers=layers, hidden=hidden)
        finally:
            onnx_models._GraphBuilder, onnx_models.MAX_WEIGHT_BYTES = saved  # noqa: SLF001
    onnx.save(model, str(directory / "model.onnx"))
    return {
        "path": str(directory / "model.onnx"),
        "weight_bytes": counts["weight_bytes"],
        "file_bytes": (directory / "model.onnx").stat().st_size + (directory / data_name).stat().st_size,
        "external_tensors": counts["external_tensors"],
    }


def write_inline_model(directory: Path, layers: int, hidden: int) -> dict[str, Any]:
    """``zoo:transformer?layers=&hidden=`` as one protobuf file, as the zoo builds it."""
    import onnx

    from passinfra.frontend.zoo import zoo_spec

    directory.mkdir(parents=True, exist_ok=True)
    model = zoo_spec(f"zoo:transformer?layers={layers}&hidden={hidden}")
    weight_bytes = sum(_tensor_bytes(t) for t in model.graph.initializer)
    path = directory / "model.onnx"
    onnx.save(model, str(path))
    return {"path": str(path), "weight_bytes": weight_bytes, "file_bytes": path.stat().st_size}


def gpt2_model(layers: int, hidden: int, vocab: int = GPT2_VOCAB, seq: int = SEQ, seed: int = 0) -> Any:
    """A GPT-2-style decoder as exporters write one, where it differs from the zoo's:
    biases on every projection; the attention's projections as MatMul + Add (GPT-2's
    Conv1D, weights ``[in, out]``), the MLP's as ``Gemm(transB=1)`` (``nn.Linear`` on 2-D
    rows, weights ``[out, in]``: the importer makes them ``nn.dense``); GELU as opset 20's
    ``Gelu``; an LM head tied to the token embedding, ``MatMul(x, Transpose(wte))`` (the
    importer folds the transpose). Heads of 64 channels; float32 weights, seeded."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    heads, head_dim = max(1, hidden // 64), min(64, hidden)
    initializers: list[Any] = []
    nodes: list[Any] = []
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def init(prefix: str, array: Any) -> str:
        name = fresh(prefix)
        initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(prefix: str, shape: tuple[int, ...], std: float = 0.02) -> str:
        return init(prefix, (rng.standard_normal(shape) * std).astype(np.float32))

    def node(op_type: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> Any:
        names = [fresh(op_type.lower()) for _ in range(outputs)]
        nodes.append(helper.make_node(op_type, inputs, names, name=fresh(op_type), **attrs))
        return names[0] if outputs == 1 else names

    def layer_norm(x: str) -> str:
        gamma = init("ln_g", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        beta = init("ln_b", (0.1 * rng.standard_normal(hidden)).astype(np.float32))
        return node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    back = init("seq_shape", np.array([1, seq, hidden], np.int64))

    def linear(x: str, inputs: int, outputs: int) -> str:  # nn.Linear on (seq, inputs) rows
        flat = node("Reshape", [x, init("rows_shape", np.array([seq, inputs], np.int64))])
        return node("Gemm", [flat, weight("fc", (outputs, inputs)), weight("fc_b", (outputs,))], transB=1)

    wte = weight("wte", (vocab, hidden))
    position_ids = init("pos", np.arange(seq, dtype=np.int64))
    positions = node("Gather", [weight("wpe", (seq, hidden), 0.01), position_ids], axis=0)
    x = node("Add", [node("Gather", [wte, "input"], axis=0), positions])
    mask = init("causal", np.tril(np.ones((seq, seq), dtype=bool)))
    split_shape = init("heads_shape", np.array([1, seq, heads, head_dim], np.int64))
    for _ in range(layers):
        qkv = node("MatMul", [layer_norm(x), weight("c_attn", (hidden, 3 * hidden))])
        qkv = node("Add", [qkv, weight("c_attn_b", (3 * hidden,))])
        q, k, v = node("Split", [qkv, init("split", np.array([hidden] * 3, np.int64))], outputs=3, axis=-1)
        q, k, v = (node("Transpose", [node("Reshape", [t, split_shape])], perm=perm)
                   for t, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3])))
        scale = init("scale", np.array(math.sqrt(head_dim), np.float32))
        scores = node("Div", [node("MatMul", [q, k]), scale])
        scores = node("Where", [mask, scores, init("neg", np.array(-1e9, np.float32))])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        merged = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), back])
        attn = node("Add", [node("MatMul", [merged, weight("c_proj", (hidden, hidden))]),
                            weight("c_proj_b", (hidden,))])
        x = node("Add", [x, attn])
        inner = node("Gelu", [linear(layer_norm(x), hidden, 4 * hidden)])
        x = node("Add", [x, node("Reshape", [linear(inner, 4 * hidden, hidden), back])])
    logits = node("MatMul", [layer_norm(x), node("Transpose", [wte], perm=[1, 0])])
    nodes.append(helper.make_node("Identity", [logits], ["output"], name="output"))
    graph = helper.make_graph(
        nodes,
        f"gpt2_{layers}x{hidden}",
        [helper.make_tensor_value_info("input", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, vocab])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], producer_name="bench")
    model.ir_version = 9
    return model


def write_saved_model(directory: Path, layers: int, hidden: int, kind: str = "zoo") -> dict[str, Any]:
    """``zoo:transformer?layers=&hidden=`` (``kind="gpt2"``: :func:`gpt2_model`) saved as a
    user saves a model with external data (:data:`SAVE_CALL`): onnx's own writer, tensors
    one after another in one data file (not page-aligned), the tensors of 1 KiB and more
    in it. The model is built in memory first, so this is for models under 2 GiB."""
    import onnx

    from passinfra.frontend.zoo import zoo_spec

    directory.mkdir(parents=True, exist_ok=True)
    if kind == "gpt2":
        model = gpt2_model(layers, hidden)
    else:
        model = zoo_spec(f"zoo:transformer?layers={layers}&hidden={hidden}")
    weight_bytes = sum(_tensor_bytes(t) for t in model.graph.initializer)
    path = directory / "model.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, size_threshold=1024
    )
    files = [entry for entry in directory.iterdir() if entry.is_file()]
    return {
        "path": str(path),
        "weight_bytes": weight_bytes,
        "file_bytes": sum(entry.stat().st_size for entry in files),
        "external_tensors": sum(
            t.data_location == onnx.TensorProto.EXTERNAL
            for t in onnx.load(str(path), load_external_data=False).graph.initializer
        ),
    }


def _tensor_bytes(tensor: Any) -> int:
    import numpy as np
    import onnx

    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    return math.prod(tensor.dims) * itemsize


# ----- one measured process ---------------------------------------------------------------------
@dataclass
class Measured:
    """One whole process: how it ended, its time, and its memory."""

    returncode: int
    wall: float
    cpu: float  # user + sys of the process and the children it waited for (the C compilers)
    maxrss: int  # bytes: ru_maxrss from wait4
    sampled_rss: int = 0  # bytes: the largest VmRSS sampled
    sampled_anon: int = 0  # RssAnon and RssFile at that sample
    sampled_file: int = 0
    killed: str = ""  # why the harness ended it (memory budget, timeout), if it did
    stdout: str = ""
    stderr: str = ""

    @property
    def peak(self) -> int:
        """The peak RSS in bytes: ``ru_maxrss``, or the largest sample when that is larger
        (the kernel updates the high-water mark lazily, at unmaps and at exit, and RSS
        counters are per-CPU sums: a sample can exceed it by a few pages)."""
        return max(self.maxrss, self.sampled_rss)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.killed

    def failure(self, what: str) -> str:
        if self.killed:
            return f"{what}: {self.killed}"
        lines = [line for line in (self.stderr or self.stdout).splitlines() if line.strip()]
        return f"{what} exited {self.returncode}: {(lines[-1] if lines else 'no output')[:300]}"


def read_status(pid: int | str) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, VmHWM, VmSize of a process, in bytes (empty when gone)."""
    values: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return values
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM", "VmSize"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def run_measured(
    command: Sequence[str],
    env: dict[str, str],
    cwd: Path,
    rss_budget: int,
    address_limit: int | None,
    timeout: float = PROCESS_TIMEOUT_S,
) -> Measured:
    """Run ``command`` to its end in a session of its own, sampling its memory, and return
    its wait4 accounting. Over ``rss_budget`` bytes of RSS, or past ``timeout``, its whole
    process group is killed; ``address_limit`` (bytes) is its RLIMIT_AS."""

    def limit() -> None:  # in the child, before exec (no thread of ours runs yet)
        if address_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_limit, address_limit))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(command), env=env, cwd=cwd, stdout=out, stderr=err, start_new_session=True, preexec_fn=limit
        )
        peak: dict[str, int] = {}
        killed: list[str] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(SAMPLE_SECONDS):
                status = read_status(proc.pid)
                rss = status.get("VmRSS", 0)
                if rss > peak.get("VmRSS", -1):
                    peak.update(status)
                reason = ""
                if rss > rss_budget:
                    reason = (
                        f"killed by the harness at {rss / GIB:.2f} GiB of RSS "
                        f"(over the budget of {rss_budget / GIB:.1f} GiB)"
                    )
                elif time.perf_counter() - started > timeout:
                    reason = f"killed by the harness after {timeout:.0f} s"
                if reason:
                    killed.append(reason)
                    _kill_group(proc.pid)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # interrupted: take the command down with us
            _kill_group(proc.pid)
            proc.wait()
            raise
        finally:
            done.set()
            watcher.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return Measured(
            returncode=proc.returncode,
            wall=wall,
            cpu=usage.ru_utime + usage.ru_stime,
            maxrss=usage.ru_maxrss * 1024,  # kilobytes on Linux
            sampled_rss=peak.get("VmRSS", 0),
            sampled_anon=peak.get("RssAnon", 0),
            sampled_file=peak.get("RssFile", 0),
            killed=killed[0] if killed else "",
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def memory_available() -> int:
    """MemAvailable of this machine, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


# ----- parsing what the CLI prints ---------------------------------------------------------------
def parse_build_seconds(stdout: str) -> float | None:
    """The build time ``raypass compile`` reports (``... built in 4.31s on the ...``)."""
    found = BUILT_LINE.findall(stdout)
    return float(found[-1]) if found else None


def parse_pass_walls(stdout: str) -> dict[str, float]:
    """Pass name -> wall ms from the ``--timing`` table (rich draws it with box characters
    off a terminal: ``│ HostCodegen │ 1 │ 2400.123 │ - │ ...``)."""
    walls: dict[str, float] = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│┃|]", line)]
        cells = [cell for cell in cells if cell != ""]
        if len(cells) < 3 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cells[0]):
            continue
        if not cells[1].isdigit():
            continue
        try:
            walls[cells[0]] = walls.get(cells[0], 0.0) + float(cells[2])
        except ValueError:
            continue
    walls.pop("total", None)
    return walls


# ----- the reference: onnxruntime, and the worker modes run inside a tree -----------------------
def reference_worker(model: str, tokens: str, output: str) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    result = session.run(None, {"input": np.load(tokens)})[0]
    np.save(output, result)
    return {"shape": list(result.shape), "dtype": str(result.dtype)}


class _RssMarks:
    """RSS at named points of one process, and the peak since the previous point."""

    def __init__(self) -> None:
        self.marks: list[dict[str, Any]] = []
        self._started = time.perf_counter()
        self._reset()

    @staticmethod
    def _reset() -> None:
        try:  # "5": reset the peak RSS (VmHWM) to the current RSS (Linux 4.0+)
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass

    def mark(self, name: str) -> None:
        status = read_status("self")
        self.marks.append(
            {
                "point": name,
                "rss": status.get("VmRSS", 0),
                "anon": status.get("RssAnon", 0),
                "file": status.get("RssFile", 0),
                "peak_since_previous": status.get("VmHWM", 0),
                "seconds": time.perf_counter() - self._started,
            }
        )
        self._reset()


def timeline_worker(model: str, library: str, phase: str) -> dict[str, Any]:
    """RSS at each point of a compile as ``raypass compile --backend local --no-cache``
    runs it (``phase="compile"``), or of ``raypass run`` (``phase="run"``)."""
    marks = _RssMarks()
    marks.mark("start (interpreter)")
    import numpy as np

    if phase == "run":
        from passinfra.runtime.module import load_module

        marks.mark("imports")
        lib = load_module(library)
        marks.mark("load_module")
        tokens = np.random.default_rng(0).integers(0, VOCAB, size=(1, SEQ)).astype(np.int64)
        lib(tokens)
        marks.mark("first call")
        lib(tokens)
        marks.mark("second call")
        return {"marks": marks.marks}

    import passinfra
    from passinfra.frontend import from_onnx
    from passinfra.instrument import PassInstrument
    from passinfra.transform import PassContext

    class RssPerPass(PassInstrument):
        def run_before_pass(self, mod: Any, info: Any) -> None:
            marks.mark(f"before {info.name}")

        def run_after_pass(self, mod: Any, info: Any) -> None:
            marks.mark(f"after {info.name}")

    marks.mark("imports")
    mod = from_onnx(model)
    marks.mark("from_onnx")
    with PassContext(opt_level=3, instruments=[RssPerPass()], config={"codegen.no_cache": True}):
        lib = passinfra.build(mod, opt_level=3)
    marks.mark("build returned (library loaded)")
    lib.export_library(library)
    marks.mark("export_library")
    del lib, mod
    import gc

    gc.collect()
    marks.mark("module and IR released")
    return {"marks": marks.marks}


# ----- the harness --------------------------------------------------------------------------------
@dataclass
class Pair:
    """One round of one (tree, model): the compile, then the run of its library."""

    compile: Measured
    run: Measured | None = None
    build_seconds: float | None = None
    pass_ms: dict[str, float] = field(default_factory=dict)
    weights_bin: int = 0
    max_abs_diff: float | None = None
    matches: bool | None = None


@dataclass
class Prepared:
    spec: ModelSpec
    path: Path
    weight_bytes: int
    file_bytes: int
    tokens: Path
    reference: Path | None
    reference_run: Measured | None


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    return env


def _worker(tree: Path, args: list[str], budget: int, address_limit: int | None) -> tuple[Measured, Any]:
    command = [sys.executable, "-c", _RUN_FILE, str(Path(__file__).resolve()), *args]
    done = run_measured(command, _env(tree), tree, budget, address_limit)
    lines = [line for line in done.stdout.splitlines() if line.startswith(_JSON_MARK)]
    data = json.loads(lines[-1][len(_JSON_MARK) :]) if done.ok and lines else None
    return done, data


class Harness:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.budget = args.memory_budget
        self.trees: dict[str, Path] = {}
        self.notes: list[str] = []

    def address_limit(self, prepared: Prepared) -> int:
        return self.budget + 2 * prepared.file_bytes + 8 * GIB

    def rss_budget(self) -> int:
        """The budget, or less when the machine has less available now (others' use)."""
        return max(GIB, min(self.budget, memory_available() - 2 * GIB))

    # trees
    def make_tree(self, label: str, ref: str) -> Path:
        if ref == "checkout":
            return ROOT
        target = self.work / f"tree-{label}"
        target.mkdir()
        archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        return target

    # models
    def prepare(self, spec: ModelSpec) -> Prepared:
        directory = self.work / f"model-{spec.key}"
        writers = {"external": "--write-external", "saved": "--write-saved", "gpt2": "--write-gpt2"}
        writer = writers.get(spec.storage, "--write-inline")
        args = [writer, str(directory), str(spec.layers), str(spec.hidden)]
        done, data = _worker(ROOT, args, self.rss_budget(), None)
        if data is None:
            raise RuntimeError(done.failure(f"writing {spec.zoo}"))
        import numpy as np

        tokens = directory / "tokens.npy"
        np.save(tokens, np.random.default_rng(0).integers(0, VOCAB, size=(1, SEQ)).astype(np.int64))
        prepared = Prepared(
            spec, Path(data["path"]), data["weight_bytes"], data["file_bytes"], tokens, None, None
        )
        reference = directory / "reference.npy"
        done, data = _worker(
            ROOT,
            ["--reference-worker", str(prepared.path), str(tokens), str(reference)],
            self.rss_budget(),
            self.address_limit(prepared),
        )
        prepared.reference_run = done
        if data is not None:
            prepared.reference = reference
        else:
            self.notes.append(done.failure(f"onnxruntime on {spec.key}"))
        return prepared

    # one (tree, model) pair of processes
    def compile_and_run(self, tree: Path, prepared: Prepared) -> Pair:
        import numpy as np

        scratch = Path(tempfile.mkdtemp(prefix="lib-", dir=self.work))
        try:
            library = scratch / "model.so"
            command = [sys.executable, "-c", _CLI, "compile", str(prepared.path), "-o", str(library)]
            command += ["--backend", "local", "--no-cache", "--timing"]
            compiled = run_measured(
                command, _env(tree), tree, self.rss_budget(), self.address_limit(prepared)
            )
            pair = Pair(compiled)
            if not compiled.ok:
                return pair
            pair.build_seconds = parse_build_seconds(compiled.stdout)
            pair.pass_ms = parse_pass_walls(compiled.stdout)
            weights = Path(str(library) + ".weights.bin")
            pair.weights_bin = weights.stat().st_size if weights.exists() else 0
            outputs = scratch / "out"
            command = [sys.executable, "-c", _CLI, "run", str(library), "--input", f"input={prepared.tokens}"]
            command += ["--output", str(outputs)]
            pair.run = run_measured(
                command, _env(tree), tree, self.rss_budget(), self.address_limit(prepared)
            )
            if pair.run.ok and prepared.reference is not None:
                got = np.load(outputs / "output_0.npy")
                want = np.load(prepared.reference)
                pair.max_abs_diff = float(np.max(np.abs(got.astype(np.float64) - want)))
                pair.matches = got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))
            return pair
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def timeline(self, tree: Path, prepared: Prepared) -> dict[str, Any]:
        scratch = Path(tempfile.mkdtemp(prefix="timeline-", dir=self.work))
        try:
            library = str(scratch / "model.so")
            result: dict[str, Any] = {}
            for phase in ("compile", "run"):
                args = ["--timeline-worker", phase, str(prepared.path), library]
                done, data = _worker(tree, args, self.rss_budget(), self.address_limit(prepared))
                if data is None:
                    result[phase] = {"error": done.failure(f"timeline {phase}")}
                    break
                result[phase] = data
            return result
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _progress(text: str) -> None:
    print(f"[weights_memory] {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every measurement, as plain data for :func:`render`."""
    harness = Harness(args, work)
    trees: dict[str, Path] = {}
    if args.before != "none":
        trees["before"] = harness.make_tree("before", args.before)
    trees["after"] = harness.make_tree("after", args.after)
    specs = model_specs(args.quick, args.large_layers, args.models)
    prepared: dict[str, Prepared] = {}
    for spec in specs:
        _progress(f"writing {spec.label}")
        prepared[spec.key] = harness.prepare(spec)
    pairs: dict[tuple[str, str], list[Pair]] = {}
    warmups: dict[tuple[str, str], list[Pair]] = {}
    skipped: dict[tuple[str, str], str] = {}
    for round_index in range(args.warmup + args.repeats):
        order = list(trees.items())
        if round_index % 2:
            order.reverse()
        for spec in specs:
            for label, tree in order:
                key = (label, spec.key)
                if key in skipped:
                    continue
                _progress(f"round {round_index} {label} {spec.key}")
                pair = harness.compile_and_run(tree, prepared[spec.key])
                (warmups if round_index < args.warmup else pairs).setdefault(key, []).append(pair)
                if pair.compile.killed or (pair.run is not None and pair.run.killed):
                    # over the budget once: again would only risk the machine again
                    skipped[key] = (pair.compile if pair.compile.killed else pair.run).failure(  # type: ignore[union-attr]
                        "compile" if pair.compile.killed else "run"
                    )
    timelines: dict[tuple[str, str], dict[str, Any]] = {}
    if not args.no_timeline:
        for spec in specs:
            for label, tree in trees.items():
                if (label, spec.key) in skipped:
                    continue
                _progress(f"timeline {label} {spec.key}")
                timelines[(label, spec.key)] = harness.timeline(tree, prepared[spec.key])
    return {
        "trees": trees,
        "specs": specs,
        "prepared": prepared,
        "pairs": pairs,
        "warmups": warmups,
        "skipped": skipped,
        "timelines": timelines,
        "notes": harness.notes,
        "budget": harness.budget,
    }


# ----- the report ---------------------------------------------------------------------------------
def _median_range(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "n/a"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _verdict(value: float, target: float) -> str:
    if value <= target:
        return "met"
    return f"MISSED by {value - target:.2f}x ({100 * (value - target) / target:.0f}%)"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    from bench.common import markdown_table

    return markdown_table(header, rows)


SUMMARY_HEADER = [
    "model", "phase", "tree", "ru_maxrss", "ru_maxrss / weights", "peak with samples / weights", "target",
    "verdict",
]


def summary_rows(data: dict[str, Any]) -> list[list[str]]:
    """The headline: per model, phase and tree, the process tree's ``ru_maxrss`` (what the
    operating system reports, as ``/usr/bin/time -v`` does) as a multiple of the weights,
    which the verdict judges; next to it this harness's own peak (``ru_maxrss`` or the
    largest 50 ms sample of VmRSS, whichever is larger)."""
    rows = []
    for spec in data["specs"]:
        prepared: Prepared = data["prepared"][spec.key]
        for phase in ("compile", "run"):
            for tree in data["trees"]:
                key = (tree, spec.key)
                target = TARGETS[phase] if spec.has_target else None
                target_text = f"<= {target}x" if target else "-"
                if key in data["skipped"] and key not in data["pairs"]:
                    reason = data["skipped"][key]
                    rows.append([spec.key, phase, tree, "n/a", "n/a", "n/a", target_text, reason])
                    continue
                measured = [getattr(p, phase) for p in data["pairs"].get(key, [])]
                good = [m for m in measured if m is not None and m.ok]
                if not good:
                    reasons = [m.failure(phase) for m in measured if m is not None]
                    reasons += [data["skipped"][key]] if key in data["skipped"] else []
                    reason = reasons[0] if reasons else f"no {phase} (the compile failed)"
                    rows.append([spec.key, phase, tree, "n/a", "n/a", "n/a", target_text, reason])
                    continue
                ratios = [m.maxrss / prepared.weight_bytes for m in good]
                verdict = _verdict(statistics.median(ratios), target) if target else "(for comparison)"
                if len(good) < len(measured):
                    verdict += f"; {len(measured) - len(good)} of {len(measured)} runs failed"
                if key in data["skipped"]:
                    verdict += f"; then stopped: {data['skipped'][key]}"
                rows.append(
                    [
                        spec.key,
                        phase,
                        tree,
                        _median_range([m.maxrss / GIB for m in good], "{:.2f}") + " GiB",
                        _median_range(ratios, "{:.2f}") + "x",
                        _median_range([m.peak / prepared.weight_bytes for m in good], "{:.2f}") + "x",
                        target_text,
                        verdict,
                    ]
                )
    return rows


def headline(rows: list[list[str]]) -> list[list[str]]:
    """The summary rows with a target, shaped for results.md's headline (bench/common.py)."""
    lines = []
    for model, phase, tree, _rss, ratio, _sampled, target, verdict in rows:
        if target == "-" or tree == "before":  # the tree before the change is for comparison
            continue
        value, _, spread = ratio.partition(" [")  # "1.07 [1.05-1.09]x", or "n/a"
        value = value if value == "n/a" else value.rstrip("x") + "x"
        lines.append([f"ru_maxrss of `raypass {phase}` (process tree) / weight bytes, {model} ({tree})",
                      value, spread.rstrip("]x") or "-", target, verdict])
    return lines


def headline_table(rows: list[list[str]]) -> str:
    from bench.common import HEADLINE_TABLE_HEADER

    return _table(HEADLINE_TABLE_HEADER, headline(rows))


def detail_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for spec in data["specs"]:
        for tree in data["trees"]:
            pairs = data["pairs"].get((tree, spec.key), [])
            compiles = [p for p in pairs if p.compile.ok]
            runs = [p.run for p in pairs if p.run is not None and p.run.ok]
            if not compiles:
                continue
            rows.append(
                [
                    spec.key,
                    tree,
                    _median_range([p.compile.wall for p in compiles], "{:.1f}"),
                    _median_range(
                        [p.build_seconds for p in compiles if p.build_seconds is not None], "{:.2f}"
                    ),
                    _median_range([p.compile.cpu for p in compiles], "{:.1f}"),
                    _split(compiles[0].compile)
                    + " / "
                    + _split(max(compiles, key=lambda p: p.compile.peak).compile),
                    _median_range([r.wall for r in runs], "{:.1f}"),
                    _split(max(runs, key=lambda r: r.peak)) if runs else "n/a",
                    _gb(statistics.median(p.weights_bin for p in compiles)),
                    _matches(pairs),
                ]
            )
    return rows


def _split(m: Measured) -> str:
    """anon + file GiB at the sampled peak."""
    return f"{m.sampled_anon / GIB:.2f} + {m.sampled_file / GIB:.2f}"


def _matches(pairs: list[Pair]) -> str:
    checked = [p for p in pairs if p.matches is not None]
    if not checked:
        return "not checked"
    good = sum(p.matches for p in checked)  # type: ignore[misc]
    worst = max(p.max_abs_diff or 0.0 for p in checked)
    return f"{good}/{len(checked)} within rtol {RTOL:g}, atol {ATOL:g} (max abs diff {worst:.2e})"


def link_rows(data: dict[str, Any]) -> list[list[str]]:
    """Per model and tree: build time, and each link pass's wall ms and share of the build."""
    rows = []
    for spec in data["specs"]:
        for tree in data["trees"]:
            pairs = [p for p in data["pairs"].get((tree, spec.key), []) if p.compile.ok and p.build_seconds]
            if not pairs:
                continue
            builds = [p.build_seconds for p in pairs]
            row = [spec.key, tree, _median_range(builds) + " s"]  # type: ignore[arg-type]
            parts = {name: [p.pass_ms.get(name, 0.0) for p in pairs] for name in LINK_PASSES}
            # the build's time in no pass: typing the input, the executor, and (after the
            # link passes) writing the weights file and loading the library
            parts["outside passes"] = [1e3 * p.build_seconds - sum(p.pass_ms.values()) for p in pairs]  # type: ignore[operator]
            for walls in parts.values():
                shares = [ms / (1e3 * p.build_seconds) for ms, p in zip(walls, pairs)]  # type: ignore[operator]
                row.append(
                    f"{statistics.median(walls):.0f} ms ({100 * statistics.median(shares):.0f}%, "
                    f"{100 * min(shares):.0f}-{100 * max(shares):.0f}%)"
                )
            rows.append(row)
    return rows


def top_pass_rows(data: dict[str, Any], count: int = 8) -> list[list[str]]:
    """The slowest passes of the external-data model's build per tree (median wall ms)."""
    rows = []
    spec = data["specs"][0]
    for tree in data["trees"]:
        pairs = [p for p in data["pairs"].get((tree, spec.key), []) if p.compile.ok and p.pass_ms]
        if not pairs:
            continue
        names = {name for p in pairs for name in p.pass_ms}
        walls = {name: statistics.median(p.pass_ms.get(name, 0.0) for p in pairs) for name in names}
        top = sorted(walls.items(), key=lambda item: -item[1])[:count]
        rows.append([tree, ", ".join(f"{name} {ms:.0f}" for name, ms in top)])
    return rows


def timeline_sections(data: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for (tree, key), result in data["timelines"].items():
        weight_bytes = data["prepared"][key].weight_bytes
        for phase in ("compile", "run"):
            entry = result.get(phase)
            if entry is None:
                continue
            lines += [f"### {key}, {tree}: {phase}", ""]
            if "error" in entry:
                lines += [entry["error"], ""]
                continue
            rows = []
            for mark, peak, seconds in _interesting(entry["marks"]):
                rows.append(
                    [
                        mark["point"],
                        f"{seconds:.2f}",
                        f"{mark['rss'] / GIB:.2f}",
                        f"{mark['anon'] / GIB:.2f}",
                        f"{mark['file'] / GIB:.2f}",
                        f"{peak / GIB:.2f}",
                        f"{peak / weight_bytes:.2f}x",
                    ]
                )
            header = ["point", "s since previous row", "RSS GiB", "anon GiB", "file GiB"]
            lines += [_table([*header, "peak since previous row GiB", "peak / weights"], rows), ""]
    return lines


def _interesting(
    marks: list[dict[str, Any]], step: int = 32 << 20
) -> list[tuple[dict[str, Any], int, float]]:
    """The marks worth a row, each with the peak RSS and the seconds since the previous
    row (over the marks left out between them): the fixed points, the first pass, the link
    passes, and any pass whose RSS or peak moved by more than ``step`` bytes (a build runs
    some 50 passes)."""
    kept: list[tuple[dict[str, Any], int, float]] = []
    last_rss, last_seconds, peak = -step, 0.0, 0
    passes_seen = False
    for mark in marks:
        point = mark["point"]
        peak = max(peak, mark["peak_since_previous"])
        is_pass = point.startswith(("before ", "after "))
        fixed = not is_pass or point.split(" ", 1)[1] in LINK_PASSES or not passes_seen
        passes_seen = passes_seen or is_pass
        moved = abs(mark["rss"] - last_rss) >= step or peak - mark["rss"] >= step
        if fixed or moved:
            kept.append((mark, peak, mark["seconds"] - last_seconds))
            last_rss, last_seconds, peak = mark["rss"], mark["seconds"], 0
    return kept


def render(data: dict[str, Any], args: argparse.Namespace, notes: dict[str, str], seconds: float) -> str:
    trees = data["trees"]
    model_rows = [
        [
            spec.label,
            _gb(data["prepared"][spec.key].weight_bytes),
            _gb(data["prepared"][spec.key].file_bytes),
            _reference_text(data["prepared"][spec.key]),
        ]
        for spec in data["specs"]
    ]
    counted = args.repeats
    lines = [
        "# Weight size: peak memory of compile and run (issues 17 and 29)",
        "",
        f"Generated by `{' '.join(['python -m bench.weights_memory', *args.argv])}`"
        f" ({'--quick run' if args.quick else 'full run'}) in {seconds:.0f} s; trees: "
        + ", ".join(f"{label} = {_tree_text(label, args)}" for label in trees)
        + ".",
        "",
        "Each number is one whole process: `raypass compile MODEL.onnx -o LIB --backend local --no-cache "
        "--timing`, then `raypass run LIB --input input=TOKENS.npy --output DIR` on its library. ru_maxrss "
        "is the process tree's peak resident set as the operating system reports it (`os.wait4`; the "
        "largest resident set the process, or a C compiler it waited for, ever had; what `/usr/bin/time -v` "
        "prints as its maximum resident set size), as a multiple of the model's weight bytes: the verdicts "
        "judge it. Peak with samples: this harness's own number, ru_maxrss or the largest sample when a "
        "sample exceeds it by the few pages the kernel's lazy accounting allows. RSS counts the "
        "file-backed pages a process maps and touches (the model file, external data, the library's "
        "weights file) as well as anonymous memory. anon + file: RssAnon and RssFile at the largest of "
        f"the 50 ms samples of /proc/PID/status. {counted} counted round(s) after {args.warmup} warm-up "
        "round(s), models and trees interleaved; median [min-max].",
        "",
        headline_table(summary_rows(data)),
        "",
        _table(SUMMARY_HEADER, summary_rows(data)),
        "",
        "## Models",
        "",
        _table(["model", "weights", "files", "onnxruntime reference (peak RSS / weights)"], model_rows),
        "",
        "## Processes",
        "",
        "Compile wall: the whole process; build: what it reports (`built in X s`); CPU: user + sys of the "
        "process and its C compilers. anon + file GiB at the sampled peak: first counted run / the run "
        "with the largest peak. weights.bin: the library's weights file.",
        "",
        _table(
            [
                "model",
                "tree",
                "compile wall s",
                "build s",
                "compile CPU s",
                "compile anon + file GiB",
                "run wall s",
                "run anon + file GiB",
                "weights.bin",
                "output vs onnxruntime",
            ],
            detail_rows(data),
        ),
        "",
        "## Build time and the link passes",
        "",
        "Wall ms of each link pass from the compile's `--timing` table (median), its share of the "
        "reported build time (median, range).",
        "",
        _table(["model", "tree", "build", *LINK_PASSES, "outside passes"], link_rows(data)),
        "",
        "The slowest passes of the external-data model's build (median wall ms):",
        "",
        _table(["tree", "passes"], top_pass_rows(data)),
        "",
    ]
    warm = [
        [spec.key, tree, f"{p.compile.peak / GIB:.2f}", f"{p.compile.wall:.1f}"]
        for spec in data["specs"]
        for tree in trees
        for p in data["warmups"].get((tree, spec.key), [])
    ]
    if warm:
        lines += [
            "Warm-up round (not counted; it reads the model files into the page cache):",
            "",
            _table(["model", "tree", "compile peak RSS GiB", "compile wall s"], warm),
            "",
        ]
    if data["timelines"]:
        lines += [
            "## Where the memory goes",
            "",
            "One compile per tree and model in-process as `raypass compile --backend local --no-cache` runs "
            "it (`--timeline-worker`): `from_onnx`, `passinfra.build` at opt_level 3 with an instrument "
            "marking every pass, `export_library`; then `load_module` and two calls in a new process. Per "
            "row: RSS (anonymous, file-backed) at that point, and, since the previous row, the seconds and "
            "the peak RSS (/proc/self/clear_refs resets the high-water mark at every point). Rows: the fixed "
            "points, the first pass, the link passes, and the passes that moved RSS or the peak by 32 MiB or "
            "more. Between the last link pass and `build returned`, `runtime.Module` writes the weights file "
            "and loads the library.",
            "",
            *timeline_sections(data),
        ]
    if data["notes"]:
        lines += ["## Notes", "", *[f"- {note}" for note in data["notes"]], ""]
    lines += [
        "## Memory safety",
        "",
        f"RSS budget per process {data['budget'] / GIB:.1f} GiB (lowered to the memory available less 2 GiB "
        "when that was less at a process's start): a process over it is killed with its process group and "
        "reported, and (tree, model) is not run again. RLIMIT_AS per process: the budget + twice the "
        "model's file bytes + 8 GiB.",
        "",
        "## Machine",
        "",
        _table(["", "value"], [[k, v] for k, v in notes.items()]),
        "",
    ]
    return "\n".join(lines)


def _reference_text(prepared: Prepared) -> str:
    run = prepared.reference_run
    if run is None:
        return "not run"
    if not run.ok:
        return run.failure("onnxruntime")
    return f"onnxruntime {_ort_version()}, 1 thread: {run.peak / prepared.weight_bytes:.2f}x"


def _ort_version() -> str:
    try:
        import onnxruntime

        return onnxruntime.__version__
    except ImportError:
        return "?"


def _tree_text(label: str, args: argparse.Namespace) -> str:
    ref = args.before if label == "before" else args.after
    if ref == "checkout":
        return f"the live checkout `{ROOT}` ({_checkout_note()})"
    resolved = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True)
    return f"`git archive {ref}` ({resolved.stdout.strip() or '?'})"


def _checkout_note() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    return head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


# ----- main ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.weights_memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="models of a few MB, one round, no 'before'")
    parser.add_argument("--repeats", type=int, default=None, help="counted rounds (default 3, --quick 1)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up rounds (default 1, --quick 0)")
    parser.add_argument(
        "--before",
        default=None,
        help=f"git ref of the 'before' tree, or none (default {BEFORE_COMMIT}; --quick none)",
    )
    parser.add_argument(
        "--after",
        default=None,
        help="git ref of the 'after' tree, or checkout (default HEAD; --quick checkout)",
    )
    parser.add_argument(
        "--large-layers", type=int, default=56, help="layers of the large model (hidden 1024)"
    )
    parser.add_argument(
        "--memory-budget", type=float, default=None, metavar="GIB", help="RSS budget per process"
    )
    parser.add_argument(
        "--models", default=",".join(MODEL_KEYS), help=f"comma-separated, of {','.join(MODEL_KEYS)}"
    )
    parser.add_argument("--no-timeline", action="store_true", help="skip the in-process RSS timelines")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--write-external", nargs=3, metavar=("DIR", "LAYERS", "HIDDEN"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--write-inline", nargs=3, metavar=("DIR", "LAYERS", "HIDDEN"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--write-saved", nargs=3, metavar=("DIR", "LAYERS", "HIDDEN"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--write-gpt2", nargs=3, metavar=("DIR", "LAYERS", "HIDDEN"), help=argparse.SUPPRESS
    )
    parser.add_argument("--reference-worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--timeline-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.warmup is None:
        args.warmup = 0 if args.quick else 1
    args.models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = sorted(set(args.models) - set(MODEL_KEYS))
    if unknown or not args.models:
        parser.error(f"unknown model(s) {', '.join(unknown) or '(none)'}; known: {', '.join(MODEL_KEYS)}")
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be at least 1 and --warmup at least 0")
    if args.before is None:
        args.before = "none" if args.quick else BEFORE_COMMIT
    if args.after is None:
        args.after = "checkout" if args.quick else "HEAD"
    if args.memory_budget is None:
        args.memory_budget = int(min(16 * GIB, memory_available() - 4 * GIB))
    else:
        args.memory_budget = int(args.memory_budget * GIB)
    if args.memory_budget < GIB:
        parser.error(f"the memory budget ({args.memory_budget / GIB:.1f} GiB) is under 1 GiB")
    return args


def _worker_main(args: argparse.Namespace) -> int | None:
    """The modes run inside a tree's process; None when this is the harness."""
    result: Any
    if args.write_external:
        directory, layers, hidden = args.write_external
        result = write_external_model(Path(directory), int(layers), int(hidden))
    elif args.write_inline:
        directory, layers, hidden = args.write_inline
        result = write_inline_model(Path(directory), int(layers), int(hidden))
    elif args.write_saved:
        directory, layers, hidden = args.write_saved
        result = write_saved_model(Path(directory), int(layers), int(hidden))
    elif args.write_gpt2:
        directory, layers, hidden = args.write_gpt2
        result = write_saved_model(Path(directory), int(layers), int(hidden), kind="gpt2")
    elif args.reference_worker:
        result = reference_worker(*args.reference_worker)
    elif args.timeline_worker:
        phase, model, library = args.timeline_worker
        result = timeline_worker(model, library, phase)
    else:
        return None
    print(_JSON_MARK + json.dumps(result), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    worker = _worker_main(args)
    if worker is not None:
        return worker
    # imported here, not at the top: the worker modes run this file inside other trees
    from bench.common import machine_notes

    notes = machine_notes()
    notes["memory available at the start"] = f"{memory_available() / GIB:.1f} GiB"
    notes["free disk in the temp directory at the start"] = (
        f"{shutil.disk_usage(tempfile.gettempdir()).free / GIB:.0f} GiB"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="raypass-weights-memory-") as work:
        data = measure(args, Path(work))
    notes["load average at the end (1, 5, 15 min)"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(data, args, notes, time.perf_counter() - started)
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
