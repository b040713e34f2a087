"""Reads a StatefulFunction's ``execute`` (its source, through ``ast``; never runs it) into what
one call computes: each state attribute's new value and the output row as expressions of the
event, the key and the attributes' previous values, plus the conditions under which Python
would raise (and its message). A construct outside the planned subset raises ``Declined``
naming the line and the construct.

The subset: attribute state whose ``__init__`` values are scalars (or ``{}`` used only as the
key's own entry: ``self.d[self.ctx.get_key()]``, the SAGE seed's pattern); an ``execute(self,
row)`` of assignments and augmented assignments to attributes and locals, ``if``/``elif``/``else``
and ``pass``, over the event's fields (``row["f"]``, ``row.get("f")``), attributes, literals and
constants (module or class level), arithmetic, comparisons, ``and``/``or``/``not``, conditional
expressions, ``min``/``max``/``abs``/``round``, ``timedelta(...)`` literals,
``.total_seconds()``, ``self.ctx.get_key()``; ending in one ``return`` of a dict literal, a tuple
or a one-row list of either (or no row).
"""

from __future__ import annotations

import ast
import builtins
import datetime as _dt
import inspect
import logging
import sys
import textwrap
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .ir import (
    FALSE,
    TRUE,
    Bin,
    BoolOp,
    Call,
    Cmp,
    Const,
    Expr,
    Field,
    If,
    IsNull,
    Key,
    Neg,
    Not,
    Old,
    type_name,
    walk,
)

__all__ = ["Declined", "Program", "analyze", "int_bits", "EXISTS"]

log = logging.getLogger(__name__)

EXISTS = "#exists"  # a per-key dict entry's virtual attribute: "<attr>#exists"
# a bound on the magnitude: |v| <= 2**bits (BIGINT's -2**63 included)
_INT_BITS = {"tinyint": 7, "smallint": 15, "int": 31, "bigint": 63}
_PLANNED_METHODS = {"__init__", "execute"}
_HOOKS = ("on_timer", "on_broadcast", "open", "close", "initial_state", "process")
# a class's source lines, first line and file, read once: inspect finds a class by parsing its
# whole module, at every statement that plans it (0.2 s for a long module)
_SOURCES: weakref.WeakKeyDictionary[type, tuple[list[str], int, str]] = weakref.WeakKeyDictionary()


def _source(cls: type) -> tuple[list[str], int, str]:
    found = _SOURCES.get(cls)
    if found is None:
        lines, first = inspect.getsourcelines(cls)
        found = _SOURCES[cls] = (lines, first, inspect.getsourcefile(cls) or inspect.getfile(cls))
    return found


class Declined(Exception):
    """The class stays on the Python path; the message names the line and the construct."""

    def __init__(self, why: str, node: ast.AST | None = None, first_line: int = 1, source: str | None = None):
        where = ""
        if node is not None and hasattr(node, "lineno"):
            code = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.FunctionDef) else f"def {node.name}"
            code = code if len(code) <= 60 else code[:57] + "..."
            where = f"line {node.lineno + first_line - 1}: `{code}`: "
        super().__init__(where + why)
        self.why = why


@dataclass
class Program:
    """One ``execute`` call, symbolically (see the module's docstring)."""

    cls_name: str
    initial: dict[str, Const]  # every attribute the plan tracks, with its value for a new key
    updates: dict[str, Expr]  # attribute -> its value after the row (only those execute may change)
    outputs: list[tuple[str, Expr]] | None  # the output row's columns; None: no row
    errors: list[tuple[Expr, list[Any]]] = field(default_factory=list)  # (when, message parts)
    # attribute -> may its previous value be None (the plan checks Python's errors with None only
    # where it may; a stream step refuses a stored None elsewhere)
    nullable: dict[str, bool] = field(default_factory=dict)


def _const(value: Any) -> Const | None:
    if value is None:
        return Const("none", True, None)
    if isinstance(value, bool):
        return Const("bool", False, value)
    if isinstance(value, int):
        return Const("int", False, value, value.bit_length())
    if isinstance(value, float):
        return Const("float", False, value)
    if isinstance(value, str):
        return Const("str", False, value)
    if isinstance(value, _dt.timedelta):
        return Const("timedelta", False, value)
    return None


def _spark_type(ddl: str) -> tuple[str, int] | None:
    d = ddl.strip().lower()
    if d in _INT_BITS:
        return "int", _INT_BITS[d]
    if d in ("double",):
        return "float", 0
    if d == "boolean":
        return "bool", 0
    if d == "string":
        return "str", 0
    if d == "timestamp":
        return "datetime", 0
    return None


def _numeric(ty: str) -> bool:
    return ty in ("int", "float")


class _Analyzer:
    def __init__(
        self,
        cls: type,
        instance: Any,
        names: list[str],
        fields: dict[str, tuple[str, str]],
        key: Any,
        settled: dict[str, tuple[str, bool]] | None = None,
    ):
        """``names``: the state attributes; ``fields``: event name -> (source column, Spark DDL);
        ``key``: (column, DDL) of the one key column, or None; ``settled``: each attribute's type
        and nullability over every value it takes (from a first pass)."""
        self.cls, self.instance = cls, instance
        self.settled = settled or {}
        self._in_condition = False
        self.seen: dict[str, tuple[str, bool]] = {}
        self.fields, self.key = fields, key
        self.errors: list[tuple[Expr, list[Any]]] = []
        try:
            lines, self.first, self.file = _source(cls)
        except (OSError, TypeError) as exc:
            raise Declined(f"the class's source is not available ({exc})") from None
        self.lines = lines
        self.frame = ""  # the statement being read, as a traceback names it (each error's last part)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        self.cdef = next(n for n in tree.body if isinstance(n, ast.ClassDef))
        self.execute_fn = cls.__dict__.get("execute")
        self.globals = getattr(self.execute_fn, "__globals__", {})
        self.initial: dict[str, Const] = {}
        self.dicts: dict[str, list[str] | None] = {}  # a per-key dict attribute -> its entry's fields
        self.containers: dict[str, str] = {}  # other non-scalar state: declined at its first use
        for n in names:
            v = instance.__dict__[n]
            if isinstance(v, dict) and not v:
                self.dicts[n] = None
                continue
            c = _const(v)
            if c is None or c.ty == "timedelta":
                self.containers[n] = type(v).__name__
                continue
            self.initial[n] = c
        self.names = set(names)

    def fail(self, why: str, node: ast.AST | None = None) -> Declined:
        return Declined(why, node, self.first)

    # ------------------------------------------------------------------ the class
    def run(self) -> Program:
        cls = self.cls
        for klass in cls.__mro__[1:]:
            if klass.__module__.startswith("spark_keyed_sql") or klass is object:
                continue
            raise self.fail(f"it inherits from {klass.__name__} (only a direct StatefulFunction subclass is planned)")
        if self.execute_fn is None:
            raise self.fail("it has no execute of its own")
        for item in self.cdef.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name not in _PLANNED_METHODS:
                why = "a hook" if item.name in _HOOKS else "a method"
                raise self.fail(f"{why} besides __init__ and execute (only those two are planned)", item)
        for hook in _HOOKS:
            if hook in cls.__dict__:
                raise self.fail(f"it defines {hook}")
        fn = next(
            (n for n in self.cdef.body if isinstance(n, ast.FunctionDef) and n.name == "execute"),
            None,
        )
        if fn is None:
            raise self.fail("its execute is not a plain method in the class body")
        args = fn.args
        if len(args.args) != 2 or args.vararg or args.kwarg or args.kwonlyargs or fn.decorator_list:
            raise self.fail("execute must take (self, row)", fn)
        self.self_name, self.row_name = args.args[0].arg, args.args[1].arg
        self.refuse_containers(fn)
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if not body:
            raise self.fail("execute is empty", fn)
        *stmts, last = body
        if not isinstance(last, ast.Return):
            stmts, last = body, None
        self.attrs: dict[str, Expr] = {}
        self.int_origin = {
            n: c.ty == "int" and self.settled.get(n, ("int",))[0] == "float" for n, c in self.initial.items()
        }
        for n, c in list(self.initial.items()):
            self.initial[n] = c = _retyped(c, self.settled.get(n, (c.ty, c.nullable))[0])
            if c.ty == "any":
                self.initial[n] = c = Const("none", True, None)
            self.attrs[n] = self.old(n)
            self.seen[n] = (c.ty, c.nullable)
        self.assigned = {
            t.attr
            for s in ast.walk(fn)
            if isinstance(s, (ast.Assign, ast.AugAssign))
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
            if isinstance(t, ast.Attribute)
        }
        self.locals: dict[str, Expr | None] = {}
        # every name execute binds is a local of it in Python, before its first binding too: such
        # a name never means the module's or a builtin's (STEP += 1 raises UnboundLocalError)
        self.local_names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.block(stmts, TRUE)
        if last is not None:
            self.frame = self.frame_of(last)
        outputs = self.returned(last)
        updates = {n: e for n, e in self.attrs.items() if not (isinstance(e, Old) and e.attr == n)}
        nullable = {n: self.old(n).nullable for n in self.initial}
        return Program(cls.__name__, dict(self.initial), updates, outputs, self.errors, nullable)

    def refuse_containers(self, fn: ast.FunctionDef) -> None:
        """A list, set or other container held as state keeps the class on Python: named at the
        first statement of ``execute`` that uses it."""
        if not self.containers:
            return
        uses = [
            s
            for s in ast.walk(fn)
            if isinstance(s, ast.stmt)
            and not isinstance(s, (ast.If, ast.FunctionDef))
            and any(
                isinstance(a, ast.Attribute) and self.is_self(a.value) and a.attr in self.containers
                for a in ast.walk(s)
            )
        ]
        if uses:
            first = min(uses, key=lambda s: (s.lineno, s.col_offset))
            raise self.fail("container state", first.value if isinstance(first, ast.Expr) else first)
        n, kind = next(iter(self.containers.items()))
        raise self.fail(f"attribute {self.cls.__name__}.{n} starts as {kind}: container state")

    # ------------------------------------------------------------------ statements
    def block(self, stmts: list[ast.stmt], pc: Expr) -> None:
        for s in stmts:
            self.stmt(s, pc)

    def frame_of(self, node: ast.stmt) -> str:
        """``node``'s line as a Python traceback shows it: the user's own frame, which ends the
        error message of a row that fails (as on the Python path)."""
        code = self.lines[node.lineno - 1].strip() if node.lineno <= len(self.lines) else ""
        return f'\n  File "{self.file}", line {node.lineno + self.first - 1}, in execute\n    {code}'

    def raises(self, cond: Expr, parts: list[Any]) -> None:
        """Python raises where ``cond`` holds: the message's parts, then the statement's frame."""
        self.errors.append((cond, [*parts, self.frame]))

    def stmt(self, s: ast.stmt, pc: Expr) -> None:
        self.frame = self.frame_of(s)
        if isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)):
            return
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise self.fail("chained assignment", s)
            self.assign(s.targets[0], self.expr(s.value, pc), s)
            return
        if isinstance(s, ast.AnnAssign) and s.value is not None:
            self.assign(s.target, self.expr(s.value, pc), s)
            return
        if isinstance(s, ast.AugAssign):
            current = self.expr(s.target, pc)
            value = self.expr(s.value, pc)
            self.assign(s.target, self.binop(s.op, current, value, pc, s, augmented=True), s)
            return
        if isinstance(s, ast.If):
            cond = self.truth(self.condition(s.test, pc), pc, s.test)
            saved_attrs, saved_locals = dict(self.attrs), dict(self.locals)
            self.block(s.body, _and(pc, cond))
            then_attrs, then_locals = self.attrs, self.locals
            self.attrs, self.locals = dict(saved_attrs), dict(saved_locals)
            self.block(s.orelse, _and(pc, _not(cond)))
            for n in set(then_attrs) | set(self.attrs):  # (a dict entry's field first set in one branch)
                self.attrs[n] = _if(cond, then_attrs.get(n, self.old(n)), self.attrs.get(n, self.old(n)))
            merged: dict[str, Expr | None] = {}
            for n in set(then_locals) | set(self.locals):
                a, b = then_locals.get(n), self.locals.get(n)
                merged[n] = None if a is None or b is None else _if(cond, a, b)
                if merged[n] is not None:
                    self.check_type(merged[n], s)
            self.locals = merged
            for n in self.attrs:
                self.check_attr_type(n, self.attrs[n], s)
            return
        if isinstance(s, ast.Return):
            raise self.fail("a return before the end of execute", s)
        if isinstance(s, (ast.For, ast.While, ast.AsyncFor)):
            raise self.fail("a loop", s)
        if isinstance(s, ast.Expr):
            raise self.fail("a call for its side effect", s)
        raise self.fail(f"a {type(s).__name__} statement", s)

    def assign(self, target: ast.expr, value: Expr, s: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            self.locals[target.id] = value
            self.check_type(value, s)
            return
        if isinstance(target, ast.Attribute) and self.is_self(target.value):
            n = target.attr
            if n in self.dicts:
                raise self.fail("container state (a dict replaced)", s)
            if n not in self.initial:
                raise self.fail(f"attribute {n!r} is not state made in __init__", s)
            self.attrs[n] = value
            self.check_attr_type(n, value, s)
            return
        entry = self.dict_entry(target, s)
        if entry is not None:
            attr, fld = entry
            if fld is None:  # self.d[key] = {...}
                if not isinstance(value, _DictValue):
                    raise self.fail("a per-key dict entry must be set to a dict literal", s)
                known = self.dicts[attr]
                if known is not None and sorted(known) != sorted(value.items):
                    raise self.fail("the per-key dict entry is set with other fields than before", s)
                self.dicts[attr] = list(value.items)
                for f, v in value.items.items():
                    self.set_virtual(f"{attr}.{f}", v, s)
                self.set_virtual(attr + EXISTS, TRUE, s)
                return
            self.require_entry(attr, fld, s)
            self.set_virtual(f"{attr}.{fld}", value, s)
            return
        raise self.fail("an assignment to something other than a local, an attribute or the key's dict entry", s)

    def old(self, n: str) -> Old:
        c = self.initial[n]
        ty, nullable = self.settled.get(n, (c.ty, c.nullable))
        return Old(ty, nullable or c.nullable, n)

    def add_virtual(self, name: str) -> None:
        if name not in self.initial:
            c = FALSE if name.endswith(EXISTS) else Const("none", True, None)
            self.initial[name] = _retyped(c, self.settled.get(name, (c.ty, c.nullable))[0])
            self.attrs[name] = self.old(name)
            self.seen[name] = (c.ty, c.nullable)

    def set_virtual(self, name: str, value: Expr, s: ast.stmt) -> None:
        self.add_virtual(name)
        self.attrs[name] = value
        self.check_attr_type(name, value, s)

    def check_type(self, e: Expr, s: ast.AST) -> None:
        if isinstance(e, _DictValue):
            return
        if e.ty == "mixed":
            raise self.fail("a value whose type depends on the branch taken", s)

    def check_attr_type(self, n: str, e: Expr, s: ast.AST) -> None:
        self.check_type(e, s)
        old, nullable = self.seen.get(n, ("none", True))
        joined = _join(old, e.ty)
        if joined == "mixed":
            raise self.fail(f"attribute {n!r} holds {type_name(old)} and {type_name(e.ty)} values", s)
        self.seen[n] = (joined, nullable or e.nullable)

    # ------------------------------------------------------------------ the return
    def returned(self, node: ast.Return | None) -> list[tuple[str, Expr]] | None:
        if node is None or node.value is None:
            return None
        v = node.value
        if isinstance(v, ast.Constant) and v.value is None:
            return None
        if isinstance(v, ast.List):
            if len(v.elts) == 0:
                return None
            if len(v.elts) != 1:
                raise self.fail("a return of several rows", node)
            v = v.elts[0]
        if isinstance(v, ast.Dict):
            out = []
            for k, item in zip(v.keys, v.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                    raise self.fail("a returned dict's keys must be string literals", node)
                out.append((k.value, self.value(self.expr(item, TRUE), item)))
            return out
        if isinstance(v, ast.Tuple):
            return [(f"#{i}", self.value(self.expr(item, TRUE), item)) for i, item in enumerate(v.elts)]
        e = self.expr(v, TRUE)
        if isinstance(e, _DictValue):
            return [(k, self.value(x, v)) for k, x in e.items.items()]
        raise self.fail("a return of something other than a dict literal, a tuple or a one-row list", node)

    def value(self, e: Expr, node: ast.AST) -> Expr:
        if isinstance(e, _DictValue):
            raise self.fail("a dict as a value", node)
        self.check_type(e, node)
        return e

    # ------------------------------------------------------------------ expressions
    def is_self(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == self.self_name

    def is_key(self, node: ast.expr, pc: Expr) -> bool:
        try:
            return isinstance(self.expr(node, pc), Key)
        except Declined:
            return False

    def dict_entry(self, node: ast.expr, s: ast.AST) -> tuple[str, str | None] | None:
        """``self.d[key]`` -> (d, None); ``self.d[key]["f"]`` -> (d, "f"); else None."""
        fld = None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and isinstance(node.value, ast.Subscript)
        ):
            fld, node = node.slice.value, node.value
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and self.is_self(node.value.value)
            and node.value.attr in self.dicts
        ):
            if not self.is_key(node.slice, TRUE):
                raise self.fail("a per-key dict indexed by something other than the key", s)
            return node.value.attr, fld
        return None

    def require_entry(self, attr: str, fld: str | None, node: ast.AST, pc: Expr = TRUE) -> None:
        if fld is not None and (self.dicts.get(attr) is None or fld not in (self.dicts[attr] or [])):
            raise self.fail(f"field {fld!r} of the per-key dict is never set", node)
        self.add_virtual(attr + EXISTS)
        ex = self.attrs[attr + EXISTS]
        if isinstance(ex, Const) and ex.value is True:
            return
        self.raises(_and(pc, _not(ex)), ["KeyError: ", ("repr", self.key_expr())])

    def key_expr(self) -> Key:
        if self.key is None:
            raise Declined("self.ctx.get_key() in an unkeyed function")
        t = _spark_type(self.key[1])
        if t is None:
            raise Declined(f"a key of type {self.key[1]}")
        return Key(t[0], True, self.key[0], t[1])

    def expr(self, node: ast.expr, pc: Expr, truth_only: bool = False) -> Expr:
        """``node``'s value; ``truth_only``: its parent uses only its truth (an ``if`` test, an
        operand of ``and`` / ``or`` / ``not`` there), so ``a or b`` may stand for a boolean."""
        saved = self._in_condition
        self._in_condition = truth_only
        try:
            return self._expr(node, pc)
        finally:
            self._in_condition = saved

    def _expr(self, node: ast.expr, pc: Expr) -> Expr:
        if isinstance(node, ast.Constant):
            c = _const(node.value)
            if c is None:
                raise self.fail(f"a {type(node.value).__name__} literal", node)
            return c
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                v = self.locals[node.id]
                if v is None:
                    raise self.fail(f"local {node.id!r} may be unset here", node)
                return v
            if node.id == self.row_name:
                raise self.fail("the whole event used as a value", node)
            return self.constant(node.id, node)
        if isinstance(node, ast.Attribute):
            if self.is_self(node.value):
                n = node.attr
                if n in self.dicts:
                    raise self.fail("container state used as a whole", node)
                if n in self.attrs:
                    return self.attrs[n]
                if n not in self.assigned and hasattr(self.instance, n):
                    c = _const(getattr(self.instance, n))
                    if c is not None:
                        return c
                raise self.fail(f"self.{n} is neither state nor a constant", node)
            base = self.static(node)
            if base is not None:
                return base
            raise self.fail("an attribute of something other than self", node)
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Name) and node.value.id == self.row_name:
                if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                    raise self.fail("an event field by a computed name", node)
                return self.field(node.slice.value, node)
            entry = self.dict_entry(node, node)
            if entry is not None:
                attr, fld = entry
                if fld is None:
                    self.require_entry(attr, None, node, pc)
                    return _DictValue({f: self.attrs[f"{attr}.{f}"] for f in self.dicts[attr] or []})
                self.require_entry(attr, fld, node, pc)
                return self.attrs[f"{attr}.{fld}"]
            raise self.fail("a subscript of something other than the event or the key's dict entry", node)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left, pc), self.expr(node.right, pc), pc, node)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand, pc, truth_only=isinstance(node.op, ast.Not) and self._in_condition)
            if isinstance(node.op, ast.Not):
                return _not(self.truth(v, pc, node))  # (operand evaluated above)
            if isinstance(node.op, ast.USub):
                if v.ty not in ("int", "float", "timedelta", "any"):
                    raise self.fail(f"unary minus on {type_name(v.ty)}", node)
                if v.ty == "float" and self.may_hold_int(v):
                    raise self.fail(
                        "negating a value that may be an int 0 held as a float (-0 is 0, -0.0 is not)", node
                    )
                self.none_error(pc, v, "bad operand type for unary -: '{}'", node)
                if isinstance(v, Const) and v.value is not None:
                    return _const(-v.value) or v
                return Neg(v.ty, False, v)
            if isinstance(node.op, ast.UAdd):
                return v
            raise self.fail("a bitwise operator", node)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.fail("a chained comparison", node)
            return self.compare(node.ops[0], self.expr(node.left, pc), node.comparators[0], pc, node)
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            parts: list[Expr] = []
            guard = pc
            for item in node.values:  # each operand's errors only where Python evaluates it
                v = self.expr(item, guard, truth_only=self._in_condition)
                if not (v.ty == "bool" and not v.nullable):
                    # `a or b` is a value, not a boolean: planned only in a condition
                    if not self._in_condition:
                        raise self.fail(f"`{op}` of non-boolean values used as a value", node)
                t = self.truth(v, guard, item)
                parts.append(t)
                guard = _and(guard, t if op == "and" else _not(t))
            return BoolOp("bool", False, op, tuple(parts))
        if isinstance(node, ast.IfExp):
            c = self.truth(self.condition(node.test, pc), pc, node.test)
            a = self.expr(node.body, _and(pc, c))
            b = self.expr(node.orelse, _and(pc, _not(c)))
            out = _if(c, a, b)
            self.check_type(out, node)
            return out
        if isinstance(node, ast.Call):
            return self.call(node, pc)
        if isinstance(node, ast.Dict):
            items = {}
            for k, item in zip(node.keys, node.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                    raise self.fail("a dict's keys must be string literals", node)
                items[k.value] = self.value(self.expr(item, pc), item)
            return _DictValue(items)
        raise self.fail(f"a {type(node).__name__} expression", node)

    def may_hold_int(self, e: Expr) -> bool:
        """Is ``e`` typed float while Python may hold an int there (an int literal that the
        attribute's later float values widen, a branch of ints)?"""
        for n in walk(e):
            if isinstance(n, Old) and self.int_origin.get(n.attr):
                return True
            if isinstance(n, If) and "int" in (n.then.ty, n.other.ty):
                return True
        return False

    def condition(self, node: ast.expr, pc: Expr) -> Expr:
        """An expression whose truth is all that is used (an ``if`` test)."""
        return self.expr(node, pc, truth_only=True)

    def field(self, name: str, node: ast.AST) -> Expr:
        if name not in self.fields:
            raise self.fail(f"event field {name!r} is not an argument of the call", node)
        column, ddl = self.fields[name]
        t = _spark_type(ddl)
        if t is None:
            raise self.fail(f"event field {name!r} is {ddl}", node)
        return Field(t[0], True, column, name, t[1])

    def constant(self, name: str, node: ast.AST) -> Expr:
        if name in self.local_names:
            raise self.fail(f"local {name!r} may be unset here", node)
        if name in self.globals:
            c = _const(self.globals[name])
            if c is not None:
                return c
            raise self.fail(f"global {name!r} is not a scalar constant", node)
        raise self.fail(f"name {name!r}", node)

    def static(self, node: ast.expr) -> Expr | None:
        """A module-level value reached by attributes (``dt.timedelta`` ...), as a constant."""
        obj = self._resolve(node)
        return _const(obj) if obj is not _MISSING else None

    def _resolve(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            if node.id in getattr(self, "local_names", ()):
                return _MISSING
            return self.globals.get(node.id, getattr(builtins, node.id, _MISSING))
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return getattr(base, node.attr, _MISSING) if base is not _MISSING else _MISSING
        return _MISSING

    def call(self, node: ast.Call, pc: Expr) -> Expr:
        f = node.func
        if node.keywords and self._resolve(f) is not _dt.timedelta:
            raise self.fail("a call with keyword arguments", node)
        # self.ctx.get_key()
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "get_key"
            and isinstance(f.value, ast.Attribute)
            and f.value.attr == "ctx"
            and self.is_self(f.value.value)
            and not node.args
        ):
            return self.key_expr()
        if isinstance(f, ast.Attribute) and f.attr == "get" and isinstance(f.value, ast.Name):
            if f.value.id == self.row_name and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
                return self.field(str(node.args[0].value), node)
        if isinstance(f, ast.Attribute) and f.attr == "total_seconds" and not node.args:
            v = self.expr(f.value, pc)
            if v.ty != "timedelta":
                raise self.fail("total_seconds() of something other than a timedelta", node)
            self.none_error(pc, v, "'NoneType' object has no attribute 'total_seconds'", node, exc="AttributeError")
            return Call("float", False, "total_seconds", (v,))
        target = self._resolve(f)
        if target is _dt.timedelta:
            values = [a.value for a in node.args if isinstance(a, ast.Constant)]
            kw = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            if len(values) != len(node.args) or len(kw) != len(node.keywords):
                raise self.fail("a timedelta of computed values", node)
            return Const("timedelta", False, _dt.timedelta(*values, **kw))
        if (
            isinstance(f, ast.Name)
            and f.id in ("min", "max", "abs", "round")
            and f.id not in self.globals
            and f.id not in self.local_names
        ):
            args = [self.expr(a, pc) for a in node.args]
            if f.id in ("min", "max"):
                if len(args) < 2:
                    raise self.fail(f"{f.id}() of an iterable", node)
                best = args[0]
                op = ">" if f.id == "max" else "<"
                for a in args[1:]:  # Python keeps the first unless a later one compares greater
                    better = self.compare_values(op, a, best, pc, node)
                    best = _if(better, a, best)
                    self.check_type(best, node)
                return best
            if f.id == "abs" and len(args) == 1 and args[0].ty in ("int", "float", "timedelta"):
                v = args[0]
                self.none_error(pc, v, "bad operand type for abs(): '{}'", node)
                return Call(v.ty, False, "abs", (v,))
            if f.id == "round" and len(args) == 1 and args[0].ty in ("int", "float"):
                v = args[0]
                if v.ty == "int":
                    return v
                raise self.fail("round() of a float (its int may pass what DECIMAL(38,0) holds)", node)
            raise self.fail(f"{f.id}() of these arguments", node)
        raise self.fail("a call", node)

    # ------------------------------------------------------------------ typed operations
    def none_error(self, pc: Expr, v: Expr, template: str, node: ast.AST, exc: str = "TypeError") -> None:
        if v.nullable:
            text = template.format("NoneType") if "{}" in template else template
            self.raises(_and(pc, IsNull("bool", False, v)), [f"{exc}: {text}"])

    def pair_errors(self, pc: Expr, a: Expr, b: Expr, template: str, only_a: bool = False) -> None:
        """Python's TypeError where either operand is None (the message names both types; an
        operand that is an int in one branch and a float in the other is named per branch)."""
        if not (a.nullable or b.nullable):
            return
        for side, x in (("a", a), ("b", b)):
            if isinstance(x, If) and x.then.ty != x.other.ty and "none" not in (x.then.ty, x.other.ty):
                for cond, branch in ((x.cond, x.then), (_not(x.cond), x.other)):
                    pa, pb = (branch, b) if side == "a" else (a, branch)
                    self.pair_errors(_and(pc, cond), pa, pb, template, only_a)
                return
        na, nb = IsNull("bool", False, a), IsNull("bool", False, b)
        for a_none, b_none in ((True, False), (False, True), (True, True)):
            if (a_none and not a.nullable) or (b_none and not b.nullable) or (only_a and not a_none):
                continue
            if a.ty == "none" and not a_none or b.ty == "none" and not b_none:
                continue
            when_a = (na if a_none else _not(na)) if a.nullable and a.ty != "none" else TRUE
            when_b = (nb if b_none else _not(nb)) if b.nullable and b.ty != "none" else TRUE
            cond = _and(pc, _and(when_a, when_b))
            ta = "NoneType" if a_none else type_name(a.ty)
            tb = "NoneType" if b_none else type_name(b.ty)
            self.raises(cond, ["TypeError: " + template.format(ta, tb)])

    def binop(self, op: ast.operator, a: Expr, b: Expr, pc: Expr, node: ast.AST, augmented: bool = False) -> Expr:
        sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%"}.get(type(op))
        if sym is None:
            raise self.fail("an operator outside + - * / // %", node)
        if isinstance(a, _DictValue) or isinstance(b, _DictValue):
            raise self.fail("arithmetic on a dict", node)
        ta, tb = a.ty, b.ty
        if ta == "bool" or tb == "bool":
            raise self.fail("arithmetic on booleans", node)
        ty = _arith_type(sym, ta, tb)
        if ty is None:
            if "none" in (ta, tb):
                ty = tb if ta == "none" else ta
            else:
                raise self.fail(f"{type_name(ta)} {sym} {type_name(tb)}", node)
        template = f"unsupported operand type(s) for {sym}{'=' if augmented else ''}: '{{}}' and '{{}}'"
        if sym == "+" and ta == "str" and b.nullable:  # Python's own words for str + None
            when = _and(_not(IsNull("bool", False, a)) if a.nullable else TRUE, IsNull("bool", False, b))
            self.raises(_and(pc, when), ['TypeError: can only concatenate str (not "NoneType") to str'])
            self.pair_errors(pc, a, b, template, only_a=True)
        else:
            self.pair_errors(pc, a, b, template)
        if sym in ("/", "//", "%"):
            if ta == "int" and tb == "int" and sym == "/" and max(int_bits(a), int_bits(b)) > 53:
                raise self.fail("true division of integers that may pass 2**53", node)
            if sym in ("//", "%") and ty != "int":
                raise self.fail(f"{sym} of floats", node)
            text = {
                ("/", "float"): "float division by zero",
                ("/", "int"): "division by zero",
                ("//", "int"): "integer division or modulo by zero",
                ("%", "int"): "integer modulo by zero"
                if sys.version_info >= (3, 11)
                else "integer division or modulo by zero",
            }[(sym, "float" if "float" in (ta, tb) else "int")]
            zero = Cmp("bool", False, "==", b, Const(tb, False, 0.0 if tb == "float" else 0))
            self.raises(_and(pc, _and(_not(IsNull("bool", False, b)), zero)), [f"ZeroDivisionError: {text}"])
        if ("int" in (ta, tb) and "float" in (ta, tb)) and (int_bits(a) > 63 or int_bits(b) > 63):
            raise self.fail("an integer past 64 bits mixed with floats", node)
        out = Bin(ty, False, sym, a, b)  # never None: Python raises instead (the errors above)
        if ty == "datetime":  # Python's datetime ends at years 1 and 9999, Spark's TIMESTAMP does not
            past = BoolOp(
                "bool",
                False,
                "or",
                (
                    Cmp("bool", False, "<", out, Const("datetime", False, _dt.datetime.min)),
                    Cmp("bool", False, ">", out, Const("datetime", False, _dt.datetime.max)),
                ),
            )
            self.raises(_and(pc, past), ["OverflowError: date value out of range"])
        return out

    def compare(self, op: ast.cmpop, a: Expr, right: ast.expr, pc: Expr, node: ast.AST) -> Expr:
        if isinstance(op, (ast.In, ast.NotIn)):
            if isinstance(right, ast.Attribute) and self.is_self(right.value) and right.attr in self.dicts:
                if not isinstance(a, Key):
                    raise self.fail("`in` a per-key dict with something other than the key", node)
                self.add_virtual(right.attr + EXISTS)
                ex = self.attrs[right.attr + EXISTS]
                return ex if isinstance(op, ast.In) else _not(ex)
            raise self.fail("`in` (container state)", node)
        b = self.expr(right, pc)
        if isinstance(op, (ast.Is, ast.IsNot)):
            if not (isinstance(right, ast.Constant) and right.value is None):
                raise self.fail("`is` against something other than None", node)
            n = IsNull("bool", False, a) if a.nullable else FALSE
            return n if isinstance(op, ast.Is) else _not(n)
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}[type(op)]
        return self.compare_values(sym, a, b, pc, node)

    def compare_values(self, sym: str, a: Expr, b: Expr, pc: Expr, node: ast.AST) -> Expr:
        ta, tb = a.ty, b.ty
        if "any" in (ta, tb):  # a first pass: the type is settled by the next
            return Cmp("bool", False, sym, a, b)
        if ta == "none" or tb == "none":
            if sym in ("==", "!="):
                other = b if ta == "none" else a
                n = IsNull("bool", False, other) if other.nullable else FALSE
                return n if sym == "==" else _not(n)
            raise self.fail("an ordering comparison with None", node)
        ok = ta == tb or (_numeric(ta) and _numeric(tb))
        if not ok:
            raise self.fail(f"a comparison of {type_name(ta)} with {type_name(tb)}", node)
        if ta == "bool" and sym not in ("==", "!="):
            raise self.fail("an ordering comparison of booleans", node)
        if ta != tb and max(int_bits(a), int_bits(b)) > 53:
            raise self.fail("a comparison of a float with an integer that may pass 2**53", node)
        if sym not in ("==", "!="):  # (== and != hold for None: None == x is False, None == None True)
            self.pair_errors(pc, a, b, f"'{sym}' not supported between instances of '{{}}' and '{{}}'")
        return Cmp("bool", False, sym, a, b)

    def truth(self, v: Expr, pc: Expr, node: ast.AST) -> Expr:
        if isinstance(v, _DictValue):
            raise self.fail("the truth of a dict", node)
        if v.ty == "bool" and not v.nullable:
            return v
        if v.ty in ("bool", "int", "float", "str", "datetime", "timedelta", "none"):
            return Call("bool", False, "truth", (v,))
        raise self.fail(f"the truth of {type_name(v.ty)}", node)


class _DictValue(Expr):
    """The key's dict entry read as a whole (returned, or compared with nothing)."""

    def __init__(self, items: dict[str, Expr]):
        object.__setattr__(self, "ty", "dict")
        object.__setattr__(self, "nullable", False)
        object.__setattr__(self, "items", items)

    def __hash__(self) -> int:
        return id(self)


_MISSING = object()


def int_bits(e: Expr, old_bits: Callable[[str], int] | None = None) -> int:
    """A bound on an int's magnitude (2**bits). ``old_bits``: an attribute's bound (the planner
    settles them; without it an attribute counts as BIGINT)."""
    if e.ty != "int":
        return 0
    if isinstance(e, (Const, Field, Key)):
        return e.bits
    if isinstance(e, Old):
        return old_bits(e.attr) if old_bits is not None else 63
    if isinstance(e, Bin):
        a, b = int_bits(e.left, old_bits), int_bits(e.right, old_bits)
        # (x // -1 of the most negative x is one bit past x; x - (x % y), which // computes, one past both)
        return {"+": max(a, b) + 1, "-": max(a, b) + 1, "*": a + b, "//": max(a, b) + 1, "%": b}.get(e.op, 63)
    if isinstance(e, If):
        return max(int_bits(e.then, old_bits), int_bits(e.other, old_bits))
    if isinstance(e, (Neg, Call)):
        return max((int_bits(c, old_bits) for c in e.children()), default=63)
    return 63


def _arith_type(sym: str, a: str, b: str) -> str | None:
    if "any" in (a, b):  # a first pass, before a None-initialised attribute's type is known
        return "any"
    if _numeric(a) and _numeric(b):
        if sym == "/":
            return "float"
        return "float" if "float" in (a, b) else "int"
    if sym == "+" and a == b == "str":
        return "str"
    if sym == "-" and a == b == "datetime":
        return "timedelta"
    if sym in ("+", "-") and a == "datetime" and b == "timedelta":
        return "datetime"
    if sym == "+" and a == "timedelta" and b == "datetime":
        return "datetime"
    if sym in ("+", "-") and a == b == "timedelta":
        return "timedelta"
    return None


def _join(a: str, b: str) -> str:
    if a == b or b in ("none", "any"):
        return a
    if a in ("none", "any"):
        return b
    if {a, b} == {"int", "float"}:
        return "float"
    return "mixed"


def _and(a: Expr, b: Expr) -> Expr:
    if a == TRUE:
        return b
    if b == TRUE:
        return a
    if FALSE in (a, b):
        return FALSE
    return BoolOp("bool", False, "and", (a, b))


def _not(a: Expr) -> Expr:
    if isinstance(a, Not):
        return a.operand
    if a == TRUE:
        return FALSE
    if a == FALSE:
        return TRUE
    return Not("bool", False, a)


def _if(c: Expr, a: Expr, b: Expr) -> Expr:
    if isinstance(a, _DictValue) or isinstance(b, _DictValue):
        if a is b:
            return a
        if not (isinstance(a, _DictValue) and isinstance(b, _DictValue)) or sorted(a.items) != sorted(b.items):
            raise Declined("a dict whose fields depend on the branch taken")
        return _DictValue({k: _if(c, a.items[k], b.items[k]) for k in a.items})
    if a == b:
        return a
    if c == TRUE:
        return a
    if c == FALSE:
        return b
    # `if k not in self.d: self.d[k] = ...` leaves the entry existing either way
    if a == TRUE and isinstance(c, Not) and c.operand == b:
        return TRUE
    return If(_join(a.ty, b.ty), a.nullable or b.nullable, c, a, b)


def analyze(cls: type, instance: Any, names: list[str], fields: dict[str, tuple[str, str]], key: Any) -> Program:
    """``names``: the class's state attributes (``AttributeLayout``); ``fields``: event name ->
    (source column, Spark DDL); ``key``: (column, DDL) of the one key column, or None.

    An attribute that starts as None (or an int) and is assigned another type holds that type
    from the second row on: the passes repeat with each attribute's settled type until it holds."""
    settled: dict[str, tuple[str, bool]] = {n: ("any", True) for n in names if instance.__dict__[n] is None}
    for attempt in range(4):
        an = _Analyzer(cls, instance, names, fields, key, settled)
        try:
            program = an.run()
        except Declined:
            if attempt == 0 and settled:  # a first pass with unknown types: try again with what it saw
                if all(t[0] in ("none", "any") for t in an.seen.values()):
                    raise
                settled = {n: t for n, t in an.seen.items() if t[0] not in ("none", "any")}
                continue
            raise
        if all(settled.get(n) == t for n, t in an.seen.items()):
            for n, (ty, _) in an.seen.items():
                if ty == "any":
                    raise Declined(f"attribute {n!r} is only ever None")
            return program
        settled = dict(an.seen)
    raise Declined("the attributes' types do not settle")


def _retyped(c: Const, ty: str) -> Const:
    """An initial value read as the attribute's settled type (None stays None, nullable)."""
    if c.value is None:
        return Const(ty, True, None)
    if c.ty == "bool" and ty == "bool":
        return c
    if ty == "float" and c.ty == "int":
        return Const("float", False, float(c.value), c.bits)
    return c
