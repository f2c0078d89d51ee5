"""bench.kernel_classes: kernels are one class exactly when their own C differs only in
its numbers (and their names)."""

from __future__ import annotations

from bench.kernel_classes import classes, kernel_class, varying_numbers
from passinfra.codegen.c_renderer import KERNEL_MARKER

SHARED = "/* rp-shared: preamble */\ntypedef long int64_t;\n"


def _kernel(name: str, body: str) -> str:
    return f"{SHARED}{KERNEL_MARKER}\nint {name}_packed(float* out) {{\n{body}\n  return 0;\n}}\n"


def test_kernels_differing_only_in_numbers_share_a_class() -> None:
    a = _kernel("fused_relu", "  for (int64_t i = 0; i < 384; ++i) out[i * 7168 + 0x10] = 0.0f;")
    b = _kernel("fused_relu_12", "  for (int64_t i = 0; i < 1024; ++i) out[i * 512 + 0x20] = 0.0f;")
    assert kernel_class("fused_relu", a) == kernel_class("fused_relu_12", b)
    # another operation, or a name that merely starts like the kernel's, is another class
    c = _kernel("fused_relu_3", "  for (int64_t i = 0; i < 384; ++i) out[i * 7168 + 0x10] = 1.0f - out[i];")
    d = _kernel("fused_relu_4", "  for (int64_t i = 0; i < 384; ++i) fused_relu_4x[i] = 0.0f;")
    named = (("fused_relu", a), ("fused_relu_3", c), ("fused_relu_4", d))
    assert len({kernel_class(name, source) for name, source in named}) == 3


def test_classes_keep_module_order_and_count_the_numbers_that_differ() -> None:
    kernels = {
        "k": _kernel("k", "  out[3] = 2.5f * out[4];"),
        "k_1": _kernel("k_1", "  out[3] = 2.5f + out[4];"),
        "k_2": _kernel("k_2", "  out[7] = 2.5f * out[9];"),
    }
    found = classes(kernels)
    assert list(found.values()) == [["k", "k_2"], ["k_1"]]
    assert varying_numbers(["k", "k_2"], kernels) == 2  # 3 -> 7 and 4 -> 9; 2.5f and 0 are the same
