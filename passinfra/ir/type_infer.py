"""Type inference over expressions, functions and modules.

The inferred type of a node is stored in its ``_checked_type`` slot, a pure cache: the
node is otherwise immutable, and a node that already carries a type is not looked at
again, which is what makes running inference twice cheap. GlobalVars are the exception:
their type depends on the module they are looked up in, so it is never cached on them.
(The same holds, more weakly, for a call of a GlobalVar: its cached type is the one the
callee had in the module it was first inferred in.)

The traversal is iterative: an explicit stack of ``(node, phase)`` entries, so chains of
100,000 calls or let bindings need no recursion. Global functions are inferred callees
first, in the order of the call graph's strongly connected components; inside a cycle
(recursion) a callee that is still being inferred contributes its declared signature,
which therefore needs annotated parameter and return types.

Each node kind has an exit rule (its typing, from its children's types) and, when it
needs more than "children first", an enter rule (leaves, calls, the binders of Let and
Function). A kind without an enter rule has its children inferred first, in the order
its schema declares them (Tuple, TupleGetItem, If).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import networkx as nx

from passinfra.errors import IRTypeError
from passinfra.ir.expr import (
    BaseFunc,
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
)
from passinfra.ir.functor import expr_children, iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.types import FuncType, TensorType, TupleType, Type

BOOL_SCALAR = TensorType((), "bool")

# error messages show the offending IR; a node deep in a 100k chain would print
# megabytes, so the text is cut after this many characters
IR_TEXT_LIMIT = 4000


def show_ir(node: object, limit: int = IR_TEXT_LIMIT) -> str:
    """Text of an IR node or type for an error message, at most about ``limit`` characters.

    Uses the printer; if the printer fails (or is not there yet) falls back to ``repr``,
    because building an error message must never raise a second error. Long text keeps
    its start (the free variables) and its end: the printer writes a node's inputs
    first, so the offending node itself is at the end.
    """
    try:
        text = str(node)
    except Exception:
        text = repr(node)
    if len(text) > limit:
        head = limit // 4
        tail = limit - head
        text = f"{text[:head]}\n... ({len(text) - limit} characters omitted) ...\n{text[-tail:]}"
    return text


def describe_scope(func_name: str | None) -> str:
    """``function @name`` when the enclosing global function is known."""
    return f"function @{func_name}" if func_name else "the expression"


def declared_type(func: BaseFunc) -> FuncType | None:
    """The FuncType a function declares through its annotations, or None if incomplete."""
    if not isinstance(func, Function) or func.ret_type is None:
        return None
    arg_types = [param.type_annotation for param in func.params]
    if any(t is None for t in arg_types):
        return None
    return FuncType(arg_types, func.ret_type)


def global_name_of(node: Expr, mod: IRModule | None) -> str | None:
    """The name under which ``node`` (the very object) is a function of ``mod``."""
    if mod is None or not isinstance(node, BaseFunc):
        return None
    for gv, func in mod.items():
        if func is node:
            return gv.name_hint
    return None


def _cache(node: Expr, ty: Type) -> None:
    object.__setattr__(node, "_checked_type", ty)


def keep_type(new: Expr, old: Expr) -> None:
    """``new`` computes what ``old`` does from inputs of the same types (a rewrite that
    only replaced children by same-typed ones: FuseOps' lifted bodies), so ``old``'s
    inferred type, where it has one, is ``new``'s: cached on it without inference."""
    if new is not old and old._checked_type is not None and new._checked_type is None:
        _cache(new, old._checked_type)


class _GlobalTypes:
    """The types of a module's global functions, inferred callees first on demand."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.types: dict[GlobalVar, Type] = {}
        # members of the recursive group being inferred right now: gv -> the whole group
        self.pending: dict[GlobalVar, list[GlobalVar]] = {}
        self.position = {gv: i for i, gv in enumerate(mod.functions)}

    def type_of(self, gv: GlobalVar, make_error: Callable[[str], IRTypeError] = IRTypeError) -> Type:
        """The type of ``gv``; ``make_error`` turns a problem with the lookup itself into
        an exception that shows where the lookup happened."""
        known = self.types.get(gv)
        if known is not None:
            return known
        if gv not in self.mod:
            names = ", ".join(f"@{g.name_hint}" for g in self.mod.functions) or "none"
            raise make_error(f"@{gv.name_hint} is not defined in the module (functions: {names})")
        if gv in self.pending:
            signature = declared_type(self.mod[gv])
            if signature is None:
                group = ", ".join(f"@{g.name_hint}" for g in self.pending[gv])
                raise make_error(
                    f"recursive functions {group}: @{gv.name_hint} is called before its type is "
                    f"known; annotate its return type and parameter types"
                )
            return signature
        self.infer([gv])
        return self.types[gv]

    def infer(self, roots: Sequence[GlobalVar]) -> None:
        """Infer ``roots`` and every function they reach, callees before callers."""
        graph = self._call_graph(roots)
        sccs = nx.condensation(graph)
        members = nx.get_node_attributes(sccs, "members")
        # callers point at callees, so the reversed graph sorts callees first; ties in
        # module order keep the first error reported deterministic
        first_position = {c: min(self.position[gv] for gv in members[c]) for c in sccs}
        for component in nx.lexicographical_topological_sort(
            sccs.reverse(copy=False), key=first_position.__getitem__
        ):
            group = sorted(members[component], key=self.position.__getitem__)
            recursive = len(group) > 1 or graph.has_edge(group[0], group[0])
            if recursive:
                for gv in group:
                    self.pending[gv] = group
            try:
                for gv in group:
                    self.types[gv] = self._infer_function(gv)
            finally:
                for gv in group:
                    self.pending.pop(gv, None)

    def _known(self, gv: GlobalVar) -> bool:
        if gv in self.types:
            return True
        func = self.mod.functions.get(gv)
        if func is not None and func._checked_type is not None:
            self.types[gv] = func._checked_type
            return True
        return False

    def _call_graph(self, roots: Sequence[GlobalVar]) -> nx.DiGraph:
        graph = nx.DiGraph()
        work = [gv for gv in roots if not self._known(gv)]
        graph.add_nodes_from(work)
        while work:
            caller = work.pop()
            func = self.mod[caller]
            if not isinstance(func, Function):
                continue
            for node in iter_post_order(func.body):
                if type(node) is GlobalVar and node in self.mod and not self._known(node):
                    if node not in graph:
                        work.append(node)
                    graph.add_edge(caller, node)
        return graph

    def _infer_function(self, gv: GlobalVar) -> Type:
        func = self.mod[gv]
        if isinstance(func, Function):
            return _Inferencer(self, gv.name_hint).run(func)
        if func._checked_type is not None:
            return func._checked_type
        raise IRTypeError(f"cannot infer the type of @{gv.name_hint}: it is a {type(func).__name__}")


_ENTER, _BIND, _EXIT = 0, 1, 2

Stack = list[tuple[Expr, int]]


class _Inferencer:
    """Infers one root expression; ``func_name`` is its global function's name, if any."""

    def __init__(self, globals_: _GlobalTypes | None, func_name: str | None) -> None:
        self.globals = globals_
        self.func_name = func_name
        self.root: Expr | None = None

    # -- driver ---------------------------------------------------------------------

    def run(self, root: Expr) -> Type:
        self.root = root
        if type(root) is GlobalVar or isinstance(root, Op):
            return self.type_of(root, root)
        stack: Stack = [(root, _ENTER)]
        while stack:
            node, phase = stack.pop()
            if phase == _ENTER:
                if node._checked_type is not None:
                    if type(node) is Var:
                        self._check_cached_var(node)
                    continue
                _rule(_ENTER_RULES, node)(self, node, stack)
            elif phase == _BIND:
                self._bind_let(node, stack)
            else:
                _cache(node, _rule(_EXIT_RULES, node)(self, node))
        return self.type_of(root, root)

    def error(self, message: str, node: object) -> IRTypeError:
        return IRTypeError(f"{message}\nin {describe_scope(self.func_name)}:\n{show_ir(node)}")

    def type_of(self, node: Expr, user: Expr) -> Type:
        """The type of an already visited child ``node`` of ``user``."""
        if type(node) is GlobalVar:
            return self._global_type(node, user)
        if isinstance(node, Op):
            raise self.error(f"op {node.name} is used as a value; an op can only be called", user)
        return node._checked_type  # type: ignore[return-value]  # set before the parent exits

    def _global_type(self, gv: GlobalVar, user: Expr) -> Type:
        if self.globals is None:
            raise self.error(f"@{gv.name_hint} is a global function, but no module was given", user)
        return self.globals.type_of(gv, lambda message: self.error(message, user))

    def _function_label(self, func: Function) -> str:
        if func is self.root and self.func_name:
            return f"function @{self.func_name}"
        where = f" in @{self.func_name}" if self.func_name else ""
        return f"a function literal{where}"

    # -- leaves -----------------------------------------------------------------------

    def _enter_var(self, var: Var, stack: Stack) -> None:
        if var.type_annotation is None:
            raise self.error(
                f"cannot infer the type of variable %{var.name_hint}: it has no type annotation "
                f"and no enclosing let binds it before this use",
                var,
            )
        _cache(var, var.type_annotation)

    def _check_cached_var(self, var: Var) -> None:
        annotation = var.type_annotation
        if annotation is not None and var._checked_type != annotation:
            raise self.error(
                f"variable %{var.name_hint} has the cached type {show_ir(var._checked_type)} "
                f"but is annotated {show_ir(annotation)}",
                var,
            )

    def _enter_constant(self, const: Constant, stack: Stack) -> None:
        _cache(const, TensorType(const.data.shape, const.data.dtype))

    def _enter_global_var(self, gv: GlobalVar, stack: Stack) -> None:
        pass  # looked up by the user of the GlobalVar; never cached (module-dependent)

    def _enter_op(self, op: Op, stack: Stack) -> None:
        raise self.error(f"op {op.name} is used as a value; an op can only be called", op)

    # -- dataflow ---------------------------------------------------------------------

    def _enter_call(self, call: Call, stack: Stack) -> None:
        stack.append((call, _EXIT))
        stack.extend((arg, _ENTER) for arg in reversed(call.args))
        if not isinstance(call.op, (Op, GlobalVar)):
            stack.append((call.op, _ENTER))

    def _exit_call(self, call: Call) -> Type:
        arg_types = [self.type_of(arg, call) for arg in call.args]
        callee = call.op
        if isinstance(callee, Op):
            return self._op_call_type(callee, arg_types, call)
        if type(callee) is GlobalVar:
            callee_name = f"@{callee.name_hint}"
            callee_type = self._global_type(callee, call)
        else:
            callee_name = f"%{callee.name_hint}" if type(callee) is Var else "a function literal"
            callee_type = self.type_of(callee, call)
        if not isinstance(callee_type, FuncType):
            raise self.error(
                f"cannot call {callee_name}: its type {show_ir(callee_type)} is not a function type", call
            )
        if len(arg_types) != len(callee_type.arg_types):
            raise self.error(
                f"call of {callee_name} passes {len(arg_types)} arguments; "
                f"it takes {len(callee_type.arg_types)}",
                call,
            )
        for i, (actual, expected) in enumerate(zip(arg_types, callee_type.arg_types)):
            if actual != expected:
                raise self.error(
                    f"argument {i} of the call of {callee_name} has type {show_ir(actual)}, "
                    f"expected {show_ir(expected)}",
                    call,
                )
        return callee_type.ret_type

    def _op_call_type(self, op: Op, arg_types: list[Type], call: Call) -> Type:
        try:
            result = op.infer_type(arg_types, call.attrs)
        except IRTypeError as err:
            raise self.error(str(err), call) from err  # Op.infer_type names the op already
        except Exception as err:
            # a type relation that breaks some other way must still name the op
            reason = f"{type(err).__name__}: {err}"
            raise self.error(f"op {op.name}: type relation failed: {reason}", call) from err
        if not isinstance(result, Type):
            raise self.error(f"op {op.name}: type relation returned {result!r}, not a Type", call)
        return result

    def _enter_children(self, node: Expr, stack: Stack) -> None:
        """The enter rule of a kind that only needs its children's types: every child
        first, in declaration order, then the node's exit rule."""
        stack.append((node, _EXIT))
        stack.extend([(child, _ENTER) for child in reversed(expr_children(node))])

    def _exit_tuple(self, tup: Tuple) -> Type:
        return TupleType([self.type_of(field, tup) for field in tup.fields])

    def _exit_tuple_getitem(self, tgi: TupleGetItem) -> Type:
        tuple_type = self.type_of(tgi.tuple_value, tgi)
        if not isinstance(tuple_type, TupleType):
            raise self.error(f"TupleGetItem needs a tuple, got a value of type {show_ir(tuple_type)}", tgi)
        if tgi.index >= len(tuple_type.fields):
            raise self.error(
                f"TupleGetItem index {tgi.index} is out of range for a tuple of "
                f"{len(tuple_type.fields)} fields",
                tgi,
            )
        return tuple_type.fields[tgi.index]

    # -- scopes -----------------------------------------------------------------------

    def _enter_let(self, let: Let, stack: Stack) -> None:
        stack.append((let, _BIND))
        stack.append((let.value, _ENTER))

    def _bind_let(self, let: Let, stack: Stack) -> None:
        value_type = self.type_of(let.value, let)
        var = let.var
        expected = var.type_annotation if var.type_annotation is not None else var._checked_type
        if expected is None:
            _cache(var, value_type)
        elif expected != value_type:
            how = "annotated" if var.type_annotation is not None else "already typed (bound elsewhere) as"
            raise self.error(
                f"let %{var.name_hint} is {how} {show_ir(expected)} but its value has type "
                f"{show_ir(value_type)}",
                let,
            )
        elif var._checked_type is None:
            _cache(var, expected)
        stack.append((let, _EXIT))
        stack.append((let.body, _ENTER))

    def _exit_let(self, let: Let) -> Type:
        return self.type_of(let.body, let)

    def _exit_if(self, node: If) -> Type:
        cond_type = self.type_of(node.cond, node)
        if cond_type != BOOL_SCALAR:
            raise self.error(
                f"the condition of an If must be a bool scalar {show_ir(BOOL_SCALAR)}, "
                f"got {show_ir(cond_type)}",
                node,
            )
        true_type = self.type_of(node.true_branch, node)
        false_type = self.type_of(node.false_branch, node)
        if true_type != false_type:
            raise self.error(
                f"the branches of an If have different types: true branch {show_ir(true_type)}, "
                f"false branch {show_ir(false_type)}",
                node,
            )
        return true_type

    def _enter_function(self, func: Function, stack: Stack) -> None:
        for param in func.params:
            if param.type_annotation is None:
                raise self.error(
                    f"cannot infer the type of parameter %{param.name_hint} of "
                    f"{self._function_label(func)}; annotate it",
                    func,
                )
            if param._checked_type is None:
                _cache(param, param.type_annotation)
            else:
                self._check_cached_var(param)
        stack.append((func, _EXIT))
        stack.append((func.body, _ENTER))

    def _exit_function(self, func: Function) -> Type:
        body_type = self.type_of(func.body, func)
        if func.ret_type is not None and func.ret_type != body_type:
            raise self.error(
                f"{self._function_label(func)} is annotated to return {show_ir(func.ret_type)} "
                f"but its body has type {show_ir(body_type)}",
                func,
            )
        return FuncType([param.type_annotation for param in func.params], body_type)


_ENTER_RULES: dict[type, Callable] = {
    Var: _Inferencer._enter_var,
    Constant: _Inferencer._enter_constant,
    GlobalVar: _Inferencer._enter_global_var,
    Op: _Inferencer._enter_op,
    Call: _Inferencer._enter_call,
    Let: _Inferencer._enter_let,
    Function: _Inferencer._enter_function,
}

_EXIT_RULES: dict[type, Callable] = {
    Call: _Inferencer._exit_call,
    Tuple: _Inferencer._exit_tuple,
    TupleGetItem: _Inferencer._exit_tuple_getitem,
    Let: _Inferencer._exit_let,
    If: _Inferencer._exit_if,
    Function: _Inferencer._exit_function,
}


def _rule(table: dict[type, Callable], node: Expr) -> Callable:
    rule = table.get(type(node))
    if rule is None:
        for base in type(node).__mro__[1:]:
            rule = table.get(base)
            if rule is not None:
                table[type(node)] = rule  # remember the subclass
                return rule
        if table is _ENTER_RULES and any(base in _EXIT_RULES for base in type(node).__mro__):
            rule = table[type(node)] = _Inferencer._enter_children
            return rule
        raise IRTypeError(f"type inference does not handle {type(node).__name__} nodes")
    return rule


def infer_module(mod: IRModule) -> IRModule:
    """Infer every function of ``mod`` (callees first) and return ``mod`` itself.

    The module is not changed: types are caches on its immutable nodes, readable as
    ``mod[name].checked_type`` and ``node.checked_type`` afterwards.
    """
    _GlobalTypes(mod).infer(list(mod.functions))
    return mod


def infer_type(node: Expr | IRModule, mod: IRModule | None = None) -> Type | IRModule:
    """Infer the type of ``node`` and cache it (and its sub-expressions' types).

    ``node`` is an expression or function, whose calls of GlobalVars are resolved in
    ``mod``; the result is its type. For an IRModule every function is inferred and the
    same module object is returned (see :func:`infer_module`). Raises IRTypeError naming
    what is wrong, the function, and showing the offending IR.
    """
    if isinstance(node, IRModule):
        return infer_module(node)
    if not isinstance(node, Expr):
        raise IRTypeError(
            f"infer_type needs an expression, a function or an IRModule, got {type(node).__name__}"
        )
    globals_ = _GlobalTypes(mod) if mod is not None else None
    name = global_name_of(node, mod)
    if globals_ is not None and name is not None:
        # route a module function through the module so its recursion is handled
        return globals_.type_of(GlobalVar(name))
    return _Inferencer(globals_, name).run(node)


__all__ = ["infer_type", "infer_module", "show_ir", "BOOL_SCALAR"]
