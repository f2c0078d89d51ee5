"""The well-formedness verifier: scoping, binding and arity rules that types do not cover.

Rules checked (each failure is a WellFormedError naming the rule, the variable or
callee, the function, and showing the offending IR):

- every Var is bound at most once in the whole program (one Let, or one parameter
  slot of one Function; the same binder reached twice through node sharing is fine);
- a Var is used only inside the scope of its binding: not in the value of its own Let,
  not after the Let body or outside the Function that binds it;
- free variables: module functions (and, by default, a Function given alone) must be
  closed; a bare expression may have free variables unless ``allow_free_vars=False``;
- calls pass as many arguments as the callee takes (ops with a fixed ``num_inputs``,
  global functions, Function literals, Vars annotated with a FuncType);
- every GlobalVar used names a function of the module (when a module is given);
- a TupleGetItem of a literal Tuple has its index in range.

The walk is iterative. The IR is a DAG, so a shared node may sit in several scopes; a
node is checked again unless the scope it was last checked in encloses the current one
(a scope is "enclosing" exactly when it is still open, because the walk is depth-first).

The walk reads each node kind's schema (:mod:`passinfra.ir.schema`) for its children; the
specific rules are the checks of Call and TupleGetItem (made before their children are
walked) and the scoping of the binders of Let and Function. A kind that binds variables
needs a scoping rule here; one without binders is walked through its children.
"""

from __future__ import annotations

from collections.abc import Callable

from passinfra.errors import IRError, WellFormedError
from passinfra.ir.expr import BaseFunc, Call, Expr, Function, GlobalVar, Let, Tuple, TupleGetItem, Var
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.schema import KindTable, NodeSchema
from passinfra.ir.type_infer import describe_scope, global_name_of, show_ir
from passinfra.ir.types import FuncType


class _Scope:
    """Variables bound for a stretch of the walk; ``open`` until the walk leaves it."""

    __slots__ = ("variables", "open")

    def __init__(self, variables: tuple[Var, ...]) -> None:
        self.variables = variables
        self.open = True


_VISIT, _BIND_LET, _CLOSE_SCOPE = 0, 1, 2


class _Checker:
    def __init__(self, mod: IRModule | None) -> None:
        self.mod = mod
        self.func_name: str | None = None
        self.binders: dict[Var, tuple[Expr, str | None]] = {}  # var -> (binder, its function)
        self.in_scope: set[Var] = set()
        self.defining: dict[Var, Let] = {}  # vars whose Let value is being walked
        self.scopes: list[_Scope] = []
        self.checked_in: dict[Expr, _Scope] = {}
        # uses of variables not in scope, classified at the end (the binder may come later)
        self.unscoped: dict[Var, tuple[Expr, str | None]] = {}

    def error(self, message: str, node: object, func_name: str | None = None) -> WellFormedError:
        where = describe_scope(func_name if func_name is not None else self.func_name)
        return WellFormedError(f"{message}\nin {where}:\n{show_ir(node)}")

    # -- the walk ---------------------------------------------------------------------

    def check(self, root: Expr, func_name: str | None) -> None:
        self.func_name = func_name
        self._open(())
        stack: list[tuple[int, Expr, Expr | None]] = [(_VISIT, root, None)]
        while stack:
            action, node, parent = stack.pop()
            if action == _VISIT:
                self._visit(node, parent, stack)
            elif action == _BIND_LET:
                del self.defining[node.var]  # type: ignore[attr-defined]
                self._open((node.var,))  # type: ignore[attr-defined]
            else:
                self._close()
        self._close()

    def _open(self, variables: tuple[Var, ...]) -> None:
        self.scopes.append(_Scope(variables))
        self.in_scope.update(variables)

    def _close(self) -> None:
        scope = self.scopes.pop()
        scope.open = False
        self.in_scope.difference_update(scope.variables)

    def _visit(self, node: Expr, parent: Expr | None, stack: list) -> None:
        kind = type(node)
        if kind is Var:
            self._use(node, parent)  # type: ignore[arg-type]
            return
        if kind is GlobalVar:
            self._check_global(node, parent)  # type: ignore[arg-type]
            return
        try:
            rule = _RULE_BY_TYPE[kind]
        except KeyError:
            return  # not a declared node kind (a PrimFunc): nothing to check here
        if rule is None:
            return  # Constant, Op: nothing to check
        last = self.checked_in.get(node)
        if last is not None and last.open:
            return  # checked in an enclosing scope: every variable it uses is still bound
        # nodes with children are memoized by scope; leaves are cheap to check every time
        self.checked_in[node] = self.scopes[-1]
        rule(self, node, stack)

    def _use(self, var: Var, parent: Expr | None) -> None:
        if var in self.in_scope:
            return
        let = self.defining.get(var)
        if let is not None:
            raise self.error(f"variable %{var.name_hint} is used in the value of its own let binding", let)
        self.unscoped.setdefault(var, (parent if parent is not None else var, self.func_name))

    def _bind(self, var: Var, binder: Expr) -> None:
        previous = self.binders.get(var)
        if previous is None:
            self.binders[var] = (binder, self.func_name)
            return
        previous_binder, previous_func = previous
        if previous_binder is binder:
            return  # the same Let or Function reached again through sharing
        raise self.error(
            f"variable %{var.name_hint} is bound twice: {_binding(previous_binder, previous_func)} "
            f"and {_binding(binder, self.func_name)}",
            binder,
        )

    def finish(self, allow_free_vars: bool) -> None:
        for var, (user, func_name) in self.unscoped.items():
            if var in self.binders:
                binder, binder_func = self.binders[var]
                raise self.error(
                    f"variable %{var.name_hint} is used outside the scope of its binding "
                    f"({_binding(binder, binder_func)})",
                    user,
                    func_name,
                )
            if not allow_free_vars:
                raise self.error(
                    f"free variable %{var.name_hint} in {describe_scope(func_name)}; functions must be "
                    f"closed (pass allow_free_vars=True to accept free variables)",
                    user,
                    func_name,
                )

    # -- per node kind ----------------------------------------------------------------

    def _check_global(self, gv: GlobalVar, parent: Expr | None) -> None:
        if self.mod is None or gv in self.mod:
            return
        names = ", ".join(f"@{g.name_hint}" for g in self.mod.functions) or "none"
        raise self.error(
            f"@{gv.name_hint} is not defined in the module (functions: {names})",
            parent if parent is not None else gv,
        )

    def _check_call(self, call: Call) -> None:
        expected = self._arity(call.op)
        if expected is not None and expected != len(call.args):
            raise self.error(
                f"call of {_callee_name(call.op)} passes {len(call.args)} arguments; it takes {expected}",
                call,
            )

    def _arity(self, callee: Expr) -> int | None:
        """How many arguments ``callee`` takes, when that is known without types."""
        if isinstance(callee, Op):
            return callee.num_inputs if callee.num_inputs >= 0 else None
        if isinstance(callee, Function):
            return len(callee.params)
        if type(callee) is GlobalVar:
            func = self.mod.functions.get(callee) if self.mod is not None else None
            params = getattr(func, "params", None)
            return len(params) if params is not None else None
        if type(callee) is Var and isinstance(callee.type_annotation, FuncType):
            return len(callee.type_annotation.arg_types)
        return None

    def _check_tuple_getitem(self, tgi: TupleGetItem) -> None:
        value = tgi.tuple_value
        if type(value) is Tuple and tgi.index >= len(value.fields):
            raise self.error(
                f"TupleGetItem index {tgi.index} is out of range for a tuple of {len(value.fields)} fields",
                tgi,
            )

    def _visit_let(self, let: Let, stack: list) -> None:
        self._bind(let.var, let)
        self.defining[let.var] = let
        # the value is walked with the variable not yet in scope, then the body in a new scope
        stack.append((_CLOSE_SCOPE, let, None))
        stack.append((_VISIT, let.body, let))
        stack.append((_BIND_LET, let, None))
        stack.append((_VISIT, let.value, let))

    def _visit_function(self, func: Function, stack: list) -> None:
        seen: set[Var] = set()
        for param in func.params:
            if param in seen:
                raise self.error(
                    f"variable %{param.name_hint} is bound twice: it appears twice in the parameters "
                    f"of one function",
                    func,
                )
            seen.add(param)
            self._bind(param, func)
        self._open(func.params)
        stack.append((_CLOSE_SCOPE, func, None))
        stack.append((_VISIT, func.body, func))


# checks made before a node's children are walked
_CHECKS: dict[type, Callable] = {Call: _Checker._check_call, TupleGetItem: _Checker._check_tuple_getitem}
# nodes that bind variables: their own walk, which opens the scopes
_SCOPE_RULES: dict[type, Callable] = {Let: _Checker._visit_let, Function: _Checker._visit_function}


def _derive_rule(schema: NodeSchema) -> Callable | None:
    """The walk of one node kind: its scoping rule, or its check (if any) followed by
    walking its children in declaration order; None for a leaf."""
    scope_rule = _SCOPE_RULES.get(schema.cls)
    if scope_rule is not None:
        return scope_rule
    if schema.binder_fields:
        raise IRError(
            f"the well-formedness check has no scoping rule for {schema.cls.__name__}, which binds variables"
        )
    if schema.leaf:
        return None
    check = _CHECKS.get(schema.cls)
    children = schema.children

    def walk(checker: _Checker, node: Expr, stack: list) -> None:
        if check is not None:
            check(checker, node)
        stack.extend([(_VISIT, child, node) for child in reversed(children(node))])

    return walk


_RULE_BY_TYPE = KindTable(_derive_rule)


def _binding(binder: Expr, func_name: str | None) -> str:
    where = f"@{func_name}" if func_name else "the expression"
    if isinstance(binder, Let):
        return f"by a let in {where}"
    return f"as a parameter of a function in {where}"


def _callee_name(callee: Expr) -> str:
    if isinstance(callee, Op):
        return f"op {callee.name}"
    if type(callee) is GlobalVar:
        return f"@{callee.name_hint}"
    if type(callee) is Var:
        return f"%{callee.name_hint}"
    return "a function literal"


def verify_well_formed(
    node: Expr | IRModule, mod: IRModule | None = None, *, allow_free_vars: bool | None = None
) -> None:
    """Raise WellFormedError if ``node`` (expression, function or module) is not well formed.

    ``mod`` resolves GlobalVars used by an expression (without it they are not checked).
    ``allow_free_vars`` defaults to False for modules and Functions (they must be closed)
    and to True for other expressions.
    """
    if isinstance(node, IRModule):
        checker = _Checker(node)
        for gv, func in node.items():
            if isinstance(func, Function):
                checker.check(func, gv.name_hint)
        checker.finish(bool(allow_free_vars))
        return
    if not isinstance(node, Expr):
        raise WellFormedError(
            f"verify_well_formed needs an expression, a function or an IRModule, got {type(node).__name__}"
        )
    if allow_free_vars is None:
        allow_free_vars = not isinstance(node, BaseFunc)
    checker = _Checker(mod)
    checker.check(node, global_name_of(node, mod))
    checker.finish(allow_free_vars)


def well_formed(
    node: Expr | IRModule, mod: IRModule | None = None, *, allow_free_vars: bool | None = None
) -> bool:
    """True if :func:`verify_well_formed` accepts ``node``."""
    try:
        verify_well_formed(node, mod, allow_free_vars=allow_free_vars)
    except WellFormedError:
        return False
    return True


__all__ = ["verify_well_formed", "well_formed"]
