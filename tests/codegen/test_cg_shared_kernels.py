"""Kernels alike but for their numbers share one generic kernel (codegen.share_kernel_code,
passinfra/codegen/shared_kernels.py): the same values at any thread count, one body per
class, the same library every build."""

from __future__ import annotations

import re

import numpy as np

import passinfra
from passinfra import tir
from passinfra.build import COMPILE_PIPELINE, _passes
from passinfra.codegen.artifacts import kernel_c_source
from passinfra.codegen.shared_kernels import (
    PINNED_EXTENT,
    PINNED_ROUNDING_EXTENT,
    inner_strides,
    short_inner_extents,
)
from passinfra.ir import op
from passinfra.ir.expr import Function, const, var
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform import PassContext, Sequential

SHARE = {"codegen.share_kernel_code": True}


WIDTHS = (40, 48, 56)  # channels of the stages: innermost loops longer than PINNED_EXTENT


def _stages(widths: tuple[int, ...] = WIDTHS) -> IRModule:
    """Three conv 3x3 + bias + ReLU stages at growing channel counts, each halving the
    image (a dense network's repetition at several sizes), then a global pool."""
    rng = np.random.default_rng(0)
    x = data = var("data", (1, 4, 48, 48))
    channels = 4
    for width in widths:
        weight = (rng.standard_normal((width, channels, 3, 3)) * 0.3).astype("float32")
        bias = (rng.standard_normal((width,)) * 0.1).astype("float32")
        x = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, const(weight), padding=(1, 1)), const(bias)))
        x = op.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
        channels = width
    return IRModule({"main": Function([data], op.nn.global_avg_pool2d(x))})


def _grouped(config: dict, widths: tuple[int, ...] = WIDTHS) -> IRModule:
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("CompileC")]
    with PassContext(opt_level=3, config=config):
        return Sequential(_passes(names), opt_level=0)(_stages(widths))


def _sharing(grouped: IRModule) -> tuple[dict[str, str], dict[str, str]]:
    """(each kernel's C source, the generic kernel each kernel that shares one calls)."""
    sources = {gv.name_hint: kernel_c_source(f) for gv, f in grouped.items() if isinstance(f, PrimFunc)}
    called = {name: re.search(r"return (rp_shared_\w+)_packed\(rp_args\);", source)
              for name, source in sources.items()}
    return sources, {name: found.group(1) for name, found in called.items() if found}


def test_alike_kernels_call_one_generic_kernel_each_defined_once():
    sources, sharing = _sharing(_grouped(SHARE))
    classes = set(sharing.values())
    assert classes and len(sharing) >= 2 * len(classes)  # every class has at least two kernels
    for symbol in classes:
        definition = f"int {symbol}_packed(void** args) {{"
        defined = [name for name, source in sources.items() if definition in source]
        members = [name for name, used in sharing.items() if used == symbol]
        assert defined == members[:1]  # the body once, with the class's first kernel
    # each kernel's numbers are its own: the generic kernels take the ones that differ
    numbers = [re.search(r"rp_numbers\[\d+\] = \{([^}]*)\}", sources[name]).group(1) for name in sharing]
    assert len(set(numbers)) == len(numbers)


def test_numbers_equal_in_every_kernel_of_a_class_are_one_number_of_the_generic_kernel():
    """Positions whose numbers agree in every kernel of a class (a row's stride that is
    also its extent, say) are one size variable: the C indexes a buffer by one expression,
    which the compiler loads once. So no two of the numbers a class passes (before its
    parallel loops' work estimates) agree in every kernel."""
    sources, sharing = _sharing(_grouped(SHARE))
    for symbol in set(sharing.values()):
        members = [name for name, used in sharing.items() if used == symbol]
        definition = f"int {symbol}_packed(void** args) {{"
        generic = next(sources[name] for name in members if definition in sources[name])
        works = len(set(re.findall(r"\bv_rp_w\d+\b", generic)))
        numbers = [re.search(r"rp_numbers\[\d+\] = \{([^}]*)\}", sources[name]).group(1) for name in members]
        rows = [[int(value) for value in text.split(",")] for text in numbers]
        columns = list(zip(*rows))[:len(rows[0]) - works]
        assert columns and len(set(columns)) == len(columns), (symbol, columns)


def test_kernels_differing_in_a_short_innermost_loop_keep_their_own_code():
    """An innermost loop of at most PINNED_EXTENT iterations keeps its constant trip count
    (GCC vectorizes it whole): the same stages at 8, 12 and 16 channels share no code, and
    every class's kernels agree on those trip counts."""
    for widths in ((8, 12, 16), WIDTHS):
        grouped = _grouped(SHARE, widths)
        _, sharing = _sharing(grouped)
        functions = {gv.name_hint: f for gv, f in grouped.items() if isinstance(f, PrimFunc)}
        for symbol in set(sharing.values()):
            members = [name for name, used in sharing.items() if used == symbol]
            assert len({short_inner_extents(functions[name].body) for name in members}) == 1
        if widths == (8, 12, 16):
            pinned = {name for name, f in functions.items() if short_inner_extents(f.body)}
            assert pinned and not pinned & set(sharing)
    assert short_inner_extents(_loop(PINNED_EXTENT)) == (PINNED_EXTENT,)
    assert short_inner_extents(_loop(PINNED_EXTENT + 1)) == ()
    # a loop that rounds (a requantization) keeps longer trip counts too
    assert short_inner_extents(_loop(PINNED_ROUNDING_EXTENT, rounds=True)) == (PINNED_ROUNDING_EXTENT,)
    assert short_inner_extents(_loop(PINNED_ROUNDING_EXTENT + 1, rounds=True)) == ()


def _shuffles(stages: tuple[tuple[int, int], ...]) -> IRModule:
    """Per (channels, stride): a 3x3 convolution of that stride into that many channels,
    then ShuffleNet's channel shuffle of them in 4 groups (reshape, transpose of the group
    axes, reshape); a last convolution and a global pool."""
    rng = np.random.default_rng(0)
    x = data = var("data", (1, 8, 16, 16))
    size, channels = 16, 8
    for width, stride in stages:
        weight = (rng.standard_normal((width, channels, 3, 3)) * 0.1).astype("float32")
        size, channels = size // stride, width
        x = op.nn.conv2d(x, const(weight), strides=(stride, stride), padding=(1, 1))
        x = op.reshape(x, (1, 4, width // 4, size, size))
        x = op.reshape(op.transpose(x, (0, 2, 1, 3, 4)), (1, width, size, size))
    weight = (rng.standard_normal((8, channels, 3, 3)) * 0.1).astype("float32")
    return IRModule({"main": Function([data], op.nn.global_avg_pool2d(op.nn.conv2d(x, const(weight))))})


def test_kernels_differing_in_an_innermost_stride_keep_their_own_code():
    """A channel shuffle reads each pixel's channels with a stride of its group's width,
    which GCC vectorizes only as a constant (3.5-4x ShuffleNet's shuffles as variables):
    shuffles of 24 and 32 channels share no code; of 24 at two image sizes they do."""
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("CompileC")]
    for stages, shared in ((((24, 1), (32, 1)), False), (((24, 1), (24, 2)), True)):
        with PassContext(opt_level=3, config=SHARE):
            grouped = Sequential(_passes(names), opt_level=0)(_shuffles(stages))
        _, sharing = _sharing(grouped)
        functions = {gv.name_hint: f for gv, f in grouped.items() if isinstance(f, PrimFunc)}
        shuffles = {name for name, f in functions.items() if "reshape" in name}
        assert len(shuffles) == len(stages) and all(inner_strides(functions[name].body) for name in shuffles)
        assert (shuffles <= set(sharing)) if shared else not shuffles & set(sharing)
    # a transposing loop pins its strides; a contiguous one, and a call handed an address, do not
    i, j = tir.TVar("i"), tir.TVar("j")
    src, dst = tir.Buffer("src", (112,), "float32"), tir.Buffer("dst", (112,), "float32")
    shuffle = tir.BufferStore(dst, src.load(j * tir.IntImm(28) + i), (i * tir.IntImm(4) + j,))
    inner = tir.For(j, tir.IntImm(0), tir.IntImm(4), tir.ForKind.SERIAL, shuffle)
    assert inner_strides(tir.For(i, tir.IntImm(0), tir.IntImm(28), tir.ForKind.SERIAL, inner)) == (28,)
    assert inner_strides(_loop(PINNED_EXTENT)) == ()
    call = tir.Evaluate(tir.Intrinsic("rp_row", (src.load(i * tir.IntImm(28)),), "int32"))
    assert inner_strides(tir.For(i, tir.IntImm(0), tir.IntImm(4), tir.ForKind.SERIAL, call)) == ()


def _loop(extent: int, rounds: bool = False) -> tir.Stmt:
    i, j = tir.TVar("i"), tir.TVar("j")
    buffer = tir.Buffer("b", (4 * extent,), "float32")
    index = i * tir.IntImm(extent) + j
    value: tir.PrimExpr = tir.FloatImm(0.0, "float32")
    if rounds:
        value = tir.Intrinsic("nearbyint", (buffer.load(index),), "float32")
    store = tir.BufferStore(buffer, value, (index,))
    inner = tir.For(j, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, store)
    return tir.For(i, tir.IntImm(0), tir.IntImm(4), tir.ForKind.SERIAL, inner)


def test_shared_code_computes_what_each_kernel_computes_and_builds_the_same_library(tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 4, 48, 48)).astype("float32")
    results, libraries, split = [], [], []
    for index, config in enumerate(({"codegen.share_kernel_code": False}, SHARE, SHARE)):
        config = {**config, "codegen.cache_dir": str(tmp_path / str(index))}
        with PassContext(opt_level=3, config=config):
            lib = passinfra.build(_stages())
        for threads in (1, 2):
            lib.set_num_threads(threads)
            before = lib.thread_stats()
            results.append(np.asarray(lib(x)))
        split.append(lib.thread_stats()["parallel_loops"] - before["parallel_loops"])
        lib.export_library(tmp_path / f"{index}.so")
        libraries.append((tmp_path / f"{index}.so").read_bytes())
    assert all(np.array_equal(results[0], result) for result in results[1:])
    assert libraries[1] == libraries[2] != libraries[0]
    # a generic kernel splits each loop over threads as its kernel did (the thread pool
    # splits a loop by its work estimate, which each kernel passes as one of its numbers)
    assert split[0] > 0 and split == [split[0]] * 3
