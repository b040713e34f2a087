"""Each attribute's new value as a recurrence Spark evaluates with window functions over the
key's ordered rows: unchanged, a plain value of the row (and other attributes' previous
values), the last value set under a condition, a running sum (with resets), or a running
extremum (a max / min, or ``if v > self.best: self.best = v``). Anything else declines."""

from __future__ import annotations

from dataclasses import dataclass

from .analyze import Declined
from .ir import Bin, BoolOp, Cmp, Const, Expr, If, IsNull, Neg, Old, olds

__all__ = ["Leaf", "Recurrence", "bounded_bits", "classify", "leaves"]


@dataclass(frozen=True)
class Leaf:
    """One way through an attribute's new value: ``kind`` keep (unchanged), set (to
    ``value``), add (``value`` added) or reset (a running sum restarts at ``value``)."""

    kind: str
    value: Expr | None = None


@dataclass
class Recurrence:
    attr: str
    kind: str  # plain | last | sum | extreme
    update: Expr  # the new value (If-tree whose leaves classify)
    # extreme: the value compared and kept, the comparison, and the guard it needs
    value: Expr | None = None
    op: str = ">"
    guard: Expr | None = None  # a condition free of the attribute
    none_first: bool = False  # `self.x is None or ...`: the first value is taken as is


def _contains(e: Expr, attr: str) -> bool:
    return attr in olds(e)


def _push(e: Expr, attr: str) -> Expr:
    """Arithmetic over an If that reads the attribute, moved into the If's branches
    (``If(c, 0, old) + 1`` -> ``If(c, 0 + 1, old + 1)``)."""
    if isinstance(e, If):
        return If(e.ty, e.nullable, e.cond, _push(e.then, attr), _push(e.other, attr))
    if isinstance(e, Bin):
        left, right = _push(e.left, attr), _push(e.right, attr)
        for side in ("left", "right"):
            node = left if side == "left" else right
            if isinstance(node, If) and _contains(node, attr):
                other = right if side == "left" else left

                def rebuild(x: Expr, other: Expr = other, side: str = side) -> Expr:
                    a, b = (x, other) if side == "left" else (other, x)
                    return _push(Bin(e.ty, a.nullable or b.nullable, e.op, a, b), attr)

                return If(e.ty, e.nullable, node.cond, rebuild(node.then), rebuild(node.other))
        return Bin(e.ty, e.nullable, e.op, left, right)
    return e


def leaves(e: Expr, attr: str) -> list[Leaf]:
    if isinstance(e, If):
        return leaves(e.then, attr) + leaves(e.other, attr)
    if isinstance(e, Old) and e.attr == attr:
        return [Leaf("keep")]
    if not _contains(e, attr):
        return [Leaf("set", e)]
    if isinstance(e, Bin) and e.op in ("+", "-") and e.ty in ("int", "float"):
        a, b = e.left, e.right
        if isinstance(a, Old) and a.attr == attr and not _contains(b, attr):
            return [Leaf("add", b if e.op == "+" else Neg(b.ty, b.nullable, b))]
        if e.op == "+" and isinstance(b, Old) and b.attr == attr and not _contains(a, attr):
            return [Leaf("add", a)]
    return [Leaf("other", e)]


def _conditions(e: Expr) -> list[Expr]:
    if isinstance(e, If):
        return [e.cond, *_conditions(e.then), *_conditions(e.other)]
    return []


def classify(attr: str, update: Expr, ty: str) -> Recurrence:
    update = _push(update, attr)
    if not _contains(update, attr):
        return Recurrence(attr, "plain", update)
    found = leaves(update, attr)
    kinds = {leaf.kind for leaf in found}
    conds_free = not any(_contains(c, attr) for c in _conditions(update))
    if conds_free and "other" not in kinds:
        if "add" in kinds:
            return Recurrence(attr, "sum", update)
        return Recurrence(attr, "last", update)
    extreme = _extreme(attr, update, ty)
    if extreme is not None:
        return extreme
    raise Declined(
        f"attribute {attr!r}: its new value depends on its previous one in a way not planned natively "
        "(planned: a running sum or count with resets, a running max/min, the last value set under a condition)"
    )


def _extreme(attr: str, update: Expr, ty: str) -> Recurrence | None:
    """``If(cond, v, old)`` where ``cond`` is ``[guard and] [old is None or] v OP old``."""
    update = _guards_merged(update, attr)
    if not isinstance(update, If):
        return None
    cond, then, other = update.cond, update.then, update.other
    if isinstance(then, Old) and then.attr == attr and not _contains(other, attr):
        # If(old > v, old, v): for types without NaN the same as If(v >= old, v, old)
        if ty == "float" or not isinstance(cond, Cmp):
            return None
        flipped = _flip(cond, attr, other)
        if flipped is None:
            return None
        cond, then, other = flipped, other, then
    if not (isinstance(other, Old) and other.attr == attr) or _contains(then, attr):
        return None
    guard = None
    if isinstance(cond, BoolOp) and cond.op == "and":
        parts = _conjuncts(cond)
        free = [p for p in parts if not _contains(p, attr)]
        reads = [p for p in parts if _contains(p, attr)]
        if len(reads) != 1:
            return None
        guard = free[0] if len(free) == 1 else BoolOp("bool", False, "and", tuple(free))
        cond = reads[0]
    none_first = False
    if isinstance(cond, BoolOp) and cond.op == "or" and len(cond.values) == 2:
        first, rest = cond.values
        if not (isinstance(first, IsNull) and isinstance(first.operand, Old) and first.operand.attr == attr):
            return None
        none_first, cond = True, rest  # (a float's NaN taken first sticks: planned with it)
    if not isinstance(cond, Cmp) or cond.op in ("==", "!="):
        return None
    a, b, op = cond.left, cond.right, cond.op
    if isinstance(a, Old) and a.attr == attr:
        a, b, op = b, a, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
    if not (isinstance(b, Old) and b.attr == attr) or a != then:
        return None
    return Recurrence(attr, "extreme", update, value=then, op=op, guard=guard, none_first=none_first)


def _guards_merged(update: Expr, attr: str) -> Expr:
    """``If(g, If(c, v, old), old)`` (``if g: if c: x = v``) as ``If(g and c, v, old)``, for a
    ``g`` free of the attribute: a guard written as an enclosing ``if``."""
    while (
        isinstance(update, If)
        and isinstance(update.other, Old)
        and update.other.attr == attr
        and isinstance(update.then, If)
        and update.then.other == update.other
        and not _contains(update.cond, attr)
    ):
        inner = update.then
        cond = BoolOp("bool", False, "and", (update.cond, inner.cond))
        update = If(update.ty, update.nullable, cond, inner.then, inner.other)
    return update


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BoolOp) and e.op == "and":
        return [p for v in e.values for p in _conjuncts(v)]
    return [e]


def _flip(cond: Cmp, attr: str, value: Expr) -> Expr | None:
    """``old OP v`` choosing old -> the condition choosing ``v`` (total orders only)."""
    a, b = cond.left, cond.right
    if isinstance(a, Old) and a.attr == attr and b == value:
        op = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}.get(cond.op)
        return None if op is None else Cmp("bool", False, op, value, a)
    return None


def bounded_bits(rec: Recurrence, init: Const, bits_of) -> int:
    """A bound on an int attribute's magnitude over any number of rows (2**40 rows a key)."""
    values = [init.bits if init.value is not None else 0]
    for leaf in leaves(rec.update, rec.attr):
        if leaf.value is not None:
            values.append(bits_of(leaf.value))
    b = max(values)
    return b + 41 if rec.kind == "sum" else b
