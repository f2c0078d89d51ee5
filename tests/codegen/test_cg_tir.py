"""Loop-level IR infrastructure: printer, verifier, functors, structural equality,
pickling, the interpreter and prim-func passes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from cg_tir_samples import loop, row_sum, transpose, vector_add

from passinfra import ir
from passinfra.codegen.prim_func_pass import PrimFuncPass, create_prim_func_pass, prim_func_pass
from passinfra.errors import EvaluationError, IRError, ParseError
from passinfra.tir import (
    LT,
    Add,
    Allocate,
    Buffer,
    BufferStore,
    Evaluate,
    FloatImm,
    ForKind,
    IfThenElse,
    IntImm,
    Intrinsic,
    LetStmt,
    Mul,
    Not,
    PrimFunc,
    Select,
    SeqStmt,
    TVar,
)
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.functor import StmtExprMutator, StmtExprVisitor, same_expr, substitute
from passinfra.tir.printer import tir_astext
from passinfra.tir.structural import assert_tir_equal, tir_structural_equal
from passinfra.tir.verify import TIRVerifyError, verify_prim_func
from passinfra.transform import PassReturnTypeError
from tests.numerics import assert_sums_close

# ------------------------------------------------------------------------------ printer


def test_printer_shows_signature_loops_and_infix_math() -> None:
    text = tir_astext(vector_add(4))
    assert text == (
        '@prim_func(num_inputs=2, global_symbol="vector_add")\n'
        "def vector_add(A: Buffer((4,), float32), B: Buffer((4,), float32), C: Buffer((4,), float32)):\n"
        "  for i in serial(0, 4):\n"
        "    C[i] = A[i] + B[i]\n"
    )


def test_printer_statements_and_parentheses() -> None:
    a = Buffer("a", (2, 3), "float32")
    i, j, t = TVar("i"), TVar("j"), TVar("t")
    scratch = Buffer("s", (3,), "float32", scope="local")
    value = (a.load(i, j) + 1.0) * FloatImm(2.0) - Intrinsic("exp", (a.load(j, i),), "float32")
    body = loop(i, 2, LetStmt(t, i * 3 - (j - 1), Allocate(scratch, SeqStmt((
        IfThenElse(LT(t, IntImm(4)), BufferStore(a, value, (i, j)), Evaluate(IntImm(0))),
        BufferStore(scratch, Select(Not(LT(i, j)), FloatImm(1.0), FloatImm(0.5)), (IntImm(0),)),
    )))), ForKind.VECTORIZED)
    text = tir_astext(body)
    assert text.splitlines() == [
        "for i in vectorized(0, 2):",
        "  t: int64 = i * 3 - (j - 1)",
        '  with allocate(s: Buffer((3,), float32, scope="local")):',
        "    if t < 4:",
        "      a[i, j] = (a[i, j] + 1.0f) * 2.0f - exp(a[j, i])",
        "    else:",
        "      evaluate(0)",
        "    s[0] = select(not i < j, 1.0f, 0.5f)",
    ]


def test_printer_renames_distinct_objects_with_one_name() -> None:
    i1, i2 = TVar("i"), TVar("i")
    a = Buffer("A", (2, 2), "float32")
    text = tir_astext(loop(i1, 2, loop(i2, 2, BufferStore(a, a.load(i2, i1), (i1, i2)))))
    assert "for i in serial(0, 2):" in text and "for i_1 in serial(0, 2):" in text
    assert "A[i, i_1] = A[i_1, i]" in text


def test_printer_summarizes_long_strings_and_bytes() -> None:
    func = vector_add(2).with_attr("c_source", "x" * 500).with_attr("object_code", b"\x7fELF")
    header = tir_astext(func).splitlines()[0]
    assert "c_source=<string of 500 characters>" in header and "object_code=<4 bytes>" in header


def test_module_astext_shows_prim_funcs_as_comments_that_parse_back_away() -> None:
    x = ir.var("x", (2,))
    mod = ir.IRModule({"main": ir.Function([x], x), "vector_add": vector_add(2)})
    text = mod.astext()
    assert "// @vector_add: a PrimFunc, not in the text format" in text
    assert "//     C[i] = A[i] + B[i]" in text
    parsed = ir.parse(text)
    assert [gv.name_hint for gv in parsed.functions] == ["main"]
    assert str(vector_add(2)) == tir_astext(vector_add(2))


def test_deep_expression_at_default_recursion_limit(default_recursion_limit) -> None:
    a = Buffer("A", (1,), "float32")
    value = a.load(0)
    for _ in range(5000):
        value = Add(value, FloatImm(1.0))
    func = PrimFunc([a], BufferStore(a, value, (IntImm(0),)), {"num_inputs": 0})
    assert tir_astext(func).count("+ 1.0f") == 5000
    verify_prim_func(func)
    assert tir_structural_equal(func, pickle.loads(pickle.dumps(func)))
    out = run_prim_func(func, np.zeros(1, "float32"))
    assert out[0] == 5000.0


# ----------------------------------------------------------------------------- verifier


def _problem(func: PrimFunc, **kwargs) -> str:
    with pytest.raises(TIRVerifyError) as info:
        verify_prim_func(func, **kwargs)
    return str(info.value)


def test_verifier_accepts_the_samples() -> None:
    for func in (vector_add(), row_sum(), transpose()):
        verify_prim_func(func)


def test_verifier_unbound_variable_names_it_and_prints_the_function() -> None:
    a = Buffer("A", (4,), "float32")
    i, stray = TVar("i"), TVar("stray")
    func = PrimFunc([a], loop(i, 4, BufferStore(a, a.load(stray), (i,))), {"global_symbol": "k"})
    message = _problem(func)
    assert "PrimFunc k is malformed" in message
    assert "variable stray is used but not bound by an enclosing For or LetStmt" in message
    assert "A[i] = A[stray]" in message  # the function text


def test_verifier_variable_out_of_its_scope() -> None:
    a = Buffer("A", (4,), "float32")
    i = TVar("i")
    func = PrimFunc([a], SeqStmt((loop(i, 4, Evaluate(i)), BufferStore(a, FloatImm(0.0), (i,)))))
    assert "variable i is used but not bound" in _problem(func)


def test_verifier_buffer_not_in_scope() -> None:
    a, scratch = Buffer("A", (4,), "float32"), Buffer("tmp", (4,), "float32")
    i = TVar("i")
    func = PrimFunc([a], loop(i, 4, BufferStore(a, scratch.load(i), (i,))))
    assert "load from buffer tmp: the buffer is neither a parameter nor allocated in scope" in _problem(func)
    allocated = PrimFunc([a], Allocate(scratch, loop(i, 4, BufferStore(a, scratch.load(i), (i,)))))
    verify_prim_func(allocated)


def test_verifier_index_count_and_flattened_mode() -> None:
    a = Buffer("A", (2, 3), "float32")
    i = TVar("i")
    func = PrimFunc([a], loop(i, 2, BufferStore(a, FloatImm(0.0), (i,))))
    assert "store to buffer A: 1 indices for a buffer of 2 dimensions, shape (2, 3)" in _problem(func)
    message = _problem(func, flattened=True)
    assert "buffer A has shape (2, 3); a flattened function has 1-d buffers only" in message
    flat = Buffer("A", (6,), "float32")
    two = PrimFunc([flat], loop(i, 2, BufferStore(flat, FloatImm(0.0), (i, i))))
    assert "2 indices, but a flattened buffer takes exactly 1" in _problem(two, flattened=True)


def test_verifier_dtype_problems() -> None:
    a = Buffer("A", (4,), "float32")
    i = TVar("i")
    mixed = PrimFunc([a], loop(i, 4, BufferStore(a, Add(a.load(i), IntImm(1, "int32")), (i,))))
    assert "operands of Add have different dtypes: float32 vs int32" in _problem(mixed)
    cond = PrimFunc([a], loop(i, 4, IfThenElse(i, BufferStore(a, FloatImm(0.0), (i,)))))
    assert "if condition must be bool, got int64" in _problem(cond)
    store = PrimFunc([a], loop(i, 4, BufferStore(a, FloatImm(0.0, "float64"), (i,))))
    assert "store to buffer A: value has dtype float64, the buffer float32" in _problem(store)
    float_index = PrimFunc([a], BufferStore(a, FloatImm(0.0), (FloatImm(1.0),)))
    assert "index 0 has dtype float32; indices are integers" in _problem(float_index)


def test_verifier_constant_index_out_of_bounds() -> None:
    a = Buffer("A", (4,), "float32")
    func = PrimFunc([a], BufferStore(a, FloatImm(0.0), (IntImm(4),)))
    assert "constant index 4 is out of bounds for dimension 0 of extent 4" in _problem(func)


def test_verifier_reports_every_problem() -> None:
    a = Buffer("A", (4,), "float32")
    x, y = TVar("x"), TVar("y")
    func = PrimFunc([a], SeqStmt((BufferStore(a, a.load(x), (IntImm(9),)), Evaluate(y))))
    with pytest.raises(TIRVerifyError) as info:
        verify_prim_func(func)
    assert len(info.value.problems) == 3
    assert isinstance(info.value, IRError)


# ----------------------------------------------------------------------------- functors


def test_mutator_returns_same_object_when_nothing_changes() -> None:
    func = row_sum()
    assert StmtExprMutator().visit_stmt(func.body) is func.body


def test_mutator_rewrites_post_order_and_shares_untouched_parts() -> None:
    class DoubleConstants(StmtExprMutator):
        def rewrite_int_imm(self, node: IntImm) -> IntImm:
            return IntImm(node.value * 2, node.dtype)

    func = vector_add(4)
    new_body = DoubleConstants().visit_stmt(func.body)
    assert same_expr(new_body.extent, IntImm(8))
    assert new_body.body is func.body.body  # the store has no int constants


def test_visitor_sees_every_expression_node() -> None:
    seen: list[str] = []

    class Names(StmtExprVisitor):
        def visit_buffer_load(self, node) -> None:
            seen.append(node.buffer.name)

    Names().visit_stmt(row_sum().body)
    assert seen == ["acc", "x", "acc"]


def test_substitute_with_fresh_binders() -> None:
    i, j = TVar("i"), TVar("j")
    a = Buffer("A", (4, 4), "float32")
    inner = loop(j, 4, BufferStore(a, FloatImm(0.0), (i, j)))
    copy = substitute(inner, {i: IntImm(2)}, fresh_binders=True)
    assert copy.loop_var is not j and same_expr(copy.body.indices[0], IntImm(2))
    assert copy.body.indices[1] is copy.loop_var
    assert same_expr(i * 2 + 1, i * 2 + 1) and not same_expr(i * 2, j * 2)


# ---------------------------------------------------------------- structural equality


def test_alpha_equivalence_maps_vars_and_buffers_by_position() -> None:
    assert tir_structural_equal(vector_add(), vector_add())
    assert not tir_structural_equal(vector_add(8), vector_add(4))
    assert not tir_structural_equal(vector_add(), vector_add().with_attr("num_inputs", 1))
    a = Buffer("A", (4,), "float32")
    i, j = TVar("i"), TVar("j")
    same_var = loop(i, 4, loop(j, 4, BufferStore(a, a.load(i), (j,))))
    swapped = loop(i, 4, loop(j, 4, BufferStore(a, a.load(j), (i,))))
    assert not tir_structural_equal(same_var, swapped)
    with pytest.raises(AssertionError, match="loop-level IR differs"):
        assert_tir_equal(same_var, swapped)


def test_alpha_equivalence_ignores_sharing_but_not_float_bits() -> None:
    a = Buffer("A", (1,), "float32")
    shared = a.load(0) + 1.0
    dag = BufferStore(a, Add(shared, shared), (IntImm(0),))
    tree = BufferStore(a, Add(a.load(0) + 1.0, a.load(0) + 1.0), (IntImm(0),))
    assert tir_structural_equal(dag, tree)
    assert not tir_structural_equal(FloatImm(0.0), FloatImm(-0.0))
    assert tir_structural_equal(FloatImm(float("nan")), FloatImm(float("nan")))


def test_module_with_prim_funcs_pickles_hashes_and_compares() -> None:
    x = ir.var("x", (2,))
    mod = ir.IRModule({"main": ir.Function([x], x), "k": row_sum().with_attr("object_code", b"\x00\x01")})
    again = pickle.loads(pickle.dumps(mod))
    func = again["k"]
    assert isinstance(func, PrimFunc) and func.attrs["object_code"] == b"\x00\x01"
    # identity survives: the allocated buffer is one object wherever it is used
    acc_alloc = func.body.body.buffer
    assert func.body.body.body.stmts[0].buffer is acc_alloc
    assert ir.structural_equal(mod, again)
    assert ir.structural_hash(mod) == ir.structural_hash(again)
    other_kernel = row_sum(3, 5).with_attr("object_code", b"\x00\x01")
    other = ir.IRModule({"main": ir.Function([x], x), "k": other_kernel})
    assert not ir.structural_equal(mod, other)
    assert ir.structural_hash(mod) != ir.structural_hash(other)
    with pytest.raises(AssertionError, match="prim func body"):
        ir.assert_structural_equal(mod, other)


def test_bytes_attrs_print_parse_and_hash_in_graph_functions() -> None:
    x = ir.var("x", (2,))
    func = ir.Function([x], x).with_attr("object_code", bytes(range(256)))
    mod = ir.IRModule({"main": func})
    text = mod.astext()
    assert 'object_code=bytes("' in text
    parsed = ir.parse(text)
    assert parsed["main"].attrs["object_code"] == bytes(range(256))
    assert ir.structural_equal(mod, parsed) and ir.structural_hash(mod) == ir.structural_hash(parsed)
    different = ir.IRModule({"main": ir.Function([x], x).with_attr("object_code", b"other")})
    assert not ir.structural_equal(mod, different)
    assert ir.structural_hash(mod) != ir.structural_hash(different)
    with pytest.raises(ParseError, match="invalid base64"):
        ir.parse(text.replace('bytes("', 'bytes("!'))


# -------------------------------------------------------------------------- interpreter


def test_interpreter_runs_the_samples() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(8).astype("float32"), rng.standard_normal(8).astype("float32")
    np.testing.assert_array_equal(run_prim_func(vector_add(), a, b), a + b)
    x = rng.standard_normal((3, 4)).astype("float32")
    # the sample adds left to right, NumPy pairwise: within the bound for any order
    assert_sums_close(run_prim_func(row_sum(), x), x.sum(axis=1), terms=4, magnitude=np.abs(x).sum(axis=1))
    np.testing.assert_array_equal(run_prim_func(transpose(), x), x.T)


def test_interpreter_integer_semantics_and_errors() -> None:
    out = Buffer("out", (3,), "int64")
    values = (IntImm(-7) // 2, IntImm(-7) % 2, Add(IntImm(0), IntImm(-7)) / IntImm(2))
    func = PrimFunc([out], SeqStmt(tuple(BufferStore(out, v, (IntImm(k),)) for k, v in enumerate(values))),
                    {"num_inputs": 0})
    assert run_prim_func(func).tolist() == [-4, 1, -3]  # floor, floor mod, C truncation
    i = TVar("i")
    a = Buffer("A", (4,), "float32")
    overrun = PrimFunc([a], loop(i, 5, BufferStore(a, FloatImm(0.0), (i,))), {"num_inputs": 0})
    with pytest.raises(EvaluationError, match=r"index \(4,\) is out of bounds for buffer A"):
        run_prim_func(overrun)
    with pytest.raises(EvaluationError, match="parameter A is a float32 buffer"):
        run_prim_func(vector_add(4), np.zeros(4, "float64"), np.zeros(4, "float32"))


# ----------------------------------------------------------------------- prim func pass


def test_prim_func_pass_touches_prim_funcs_only() -> None:
    seen: list[str] = []

    def mark(func, mod, ctx):
        seen.append(func.attrs["global_symbol"])
        return func.with_attr("marked", True)

    x = ir.var("x", (2,))
    mod = ir.IRModule({"main": ir.Function([x], x), "k": vector_add(2)})
    out = create_prim_func_pass(mark, opt_level=0, name="Mark")(mod)
    assert seen == ["vector_add"]
    assert out["k"].attrs["marked"] is True and out["main"] is mod["main"]
    skipped = ir.IRModule({"k": vector_add(2).with_attr("SkipOptimization", True)})
    assert create_prim_func_pass(mark, opt_level=0, name="Mark")(skipped)["k"] is skipped["k"]


def test_prim_func_pass_decorator_on_function_and_class() -> None:
    @prim_func_pass(opt_level=2)
    def tag(func, mod, ctx):
        return func.with_attr("tagged", 1)

    assert isinstance(tag, PrimFuncPass) and tag.info.name == "tag" and tag.info.opt_level == 2

    @prim_func_pass(opt_level=0, name="ClassTag")
    class Tagger:
        def __init__(self, value: int) -> None:
            self.value = value

        def transform_function(self, func, mod, ctx):
            return func.with_attr("tagged", self.value)

    instance = Tagger(7)
    assert isinstance(instance, PrimFuncPass) and instance.value == 7
    mod = ir.IRModule({"k": vector_add(2)})
    assert instance(mod)["k"].attrs["tagged"] == 7
    with pytest.raises(ValueError, match="opt_level"):
        prim_func_pass(lambda f, m, c: f)


def test_prim_func_pass_must_return_a_prim_func() -> None:
    x = ir.var("x", (2,))
    bad = create_prim_func_pass(lambda func, mod, ctx: ir.Function([x], x), opt_level=0, name="Bad")
    with pytest.raises(PassReturnTypeError, match="expected a PrimFunc"):
        bad(ir.IRModule({"k": vector_add(2)}))


def test_mul_sugar_builds_nodes() -> None:
    i = TVar("i")
    assert type(i * 2) is Mul and same_expr((i * 2).b, IntImm(2))
