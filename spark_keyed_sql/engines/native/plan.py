"""A keyed step planned as Spark SQL: the analyzed ``execute`` (``analyze.py``), each
attribute's recurrence (``recurrences.py``) as window functions over the key's rows in order,
the output row, and Python's errors as a filter that raises them (``raise_error``).

The SQL is a chain of SELECTs over the step's source: each adds the columns whose window
functions read columns of the SELECT below it. ``sql`` shows the chain as one statement (what
EXPLAIN KEYED prints); ``apply`` runs the same chain on the source DataFrame.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ...api.types import AtomicType, DecimalType
from ...runtime.columns import quote
from ...runtime.plan import KeyedPlan
from ...state.snapshots import HAS_ATTRS
from .analyze import Declined, Program, int_bits
from .ir import Bin, Const, Expr, If, olds, walk
from .recurrences import Recurrence, bounded_bits, classify, leaves
from .render import DECIMAL, DIVIDE_BITS, MAX_BITS, Renderer, literal, null_literal, out_of_range
from .stored import Stored, StoredAttribute, stored_attributes

__all__ = ["LAST", "NativePlan", "StreamState", "build"]

_OWN = re.compile(r"`(__ksn_[a-z]+\d+)`")
SEQ = "__ksn_seq"
LAST = "__ksn_last0"  # a stream step: the key's last row of the batch (its values are the new state)
_OUT_INT = {"bigint": 63, "int": 31, "smallint": 15, "tinyint": 7}
NAN = "CAST('NaN' AS DOUBLE)"


@dataclass
class NativePlan:
    function: str
    layers: list[list[tuple[str, str]]]  # each SELECT's new columns: (name, SQL)
    outputs: list[tuple[str, str]]  # the step's output columns: (name, SQL)
    # the filter that keeps the rows Python would not fail on and raises Python's error on the
    # first that it would (None: nothing can fail). It reads a cheap condition and builds the
    # message only inside raise_error: analysing the message once, not as a column of its own,
    # halves what the chain costs Spark's analyzer.
    raising: str | None
    source_columns: list[str] = field(default_factory=list)
    # a stream step (``StreamState``): the key's stored state starts its recurrences; None: one-shot
    stream: StreamState | None = None
    # a stream step: every micro-batch native (``native = true``); else each chooses (``auto``,
    # engines/bulk/native_choice.py)
    every_batch: bool = False

    def sql(self, source: str = "source") -> str:
        """The whole chain as one statement over ``source``."""
        text = f"SELECT {', '.join(quote(c) for c in self.source_columns)} FROM {source}"
        kept = list(self.source_columns)
        for i, layer in enumerate(self.layers):
            cols = [quote(c) for c in kept] + [f"{s} AS {quote(n)}" for n, s in layer]
            text = f"SELECT {', '.join(cols)}\nFROM ({text}) AS l{i}"
            kept += [n for n, _ in layer]
        final = [f"{s} AS {quote(n)}" for n, s in self.outputs]
        where = f"\nWHERE {self.raising}" if self.raising else ""
        return f"SELECT {', '.join(final)}\nFROM ({text}) AS out{where}"

    def layered(self, df: Any) -> Any:
        """The source with every layer's columns, rows Python would fail on raised."""
        out = df.selectExpr(*(quote(c) for c in self.source_columns))
        for layer in self.layers:
            out = out.selectExpr("*", *(f"{s} AS {quote(n)}" for n, s in layer))
        if self.raising:
            out = out.where(self.raising)
        return out

    def apply(self, df: Any) -> Any:
        return self.layered(df).selectExpr(*(f"{s} AS {quote(n)}" for n, s in self.outputs))


@dataclass
class StreamState:
    """What a stream step adds: the stored state columns it reads (the key's state row, joined in;
    NULL for a key without state), and over ``layered``'s columns the new state row (``columns``:
    each stored column's SQL, taken on the key's last row, ``LAST``) and whether it holds what
    the stored row holds (``same``: then nothing is written, as on the Python path). A key keeps
    a state row once it ran, whatever its values (only ``clear_state``, never planned, drops it)."""

    stored: list[str]  # HAS_ATTRS and the attributes' columns
    columns: list[tuple[str, str]]
    same: str


def _window(
    plan: KeyedPlan,
    frame: str | None = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
    extra: str = "",
    ties: bool = True,
) -> str:
    keys = ", ".join(quote(k) for k in plan.key_columns) + extra
    # ``ties``: rows that tie on ORDER BY run in one order in every window (the arrival order)
    order = ", ".join(
        [
            f"{quote(o.column)} {'ASC' if o.ascending else 'DESC'} NULLS "
            f"{'FIRST' if (o.ascending if o.nulls_first is None else o.nulls_first) else 'LAST'}"
            for o in plan.order
        ]
        + ([quote(SEQ)] if ties else [])
    )
    part = f"PARTITION BY {keys} " if keys else ""
    return f"({part}ORDER BY {order}{' ' + frame if frame else ''})"


class _Builder:
    def __init__(self, program: Program, plan: KeyedPlan, returns: Any, layout: Any = None, ties: bool = True):
        """``layout``: the class's AttributeLayout for a stream step (None: one-shot). ``ties``:
        every window orders rows that tie on ORDER BY by arrival (``SEQ``); without, by the one
        sort all the windows share (``regrouped``: a window over other partitions, which sorts
        again, was made: ties are needed)."""
        self.program, self.plan, self.returns, self.state_layout = program, plan, returns, layout
        self.ties, self.regrouped = ties, False
        self.stored: list[Stored] = []
        self.store_checks: list[tuple[str, str]] = []  # a stream step's state that cannot be stored
        self.names = {a: i for i, a in enumerate(sorted(program.initial))}
        self.defs: dict[str, tuple[str, set[str]]] = {}  # column -> (SQL, the defined columns it reads)
        self.attr_bits: dict[str, int] = {}
        self.recs: dict[str, Recurrence] = {}
        self.needs_old: set[str] = set()

    # ------------------------------------------------------------------ ints
    def bits(self, e: Expr) -> int:
        return int_bits(e, lambda a: self.attr_bits.get(a, 63))

    def settle_bits(self) -> None:
        ints = {a: c for a, c in self.program.initial.items() if c.ty == "int"}
        self.attr_bits = {a: (c.bits if c.value is not None else 0) for a, c in ints.items()}
        for _ in range(8):
            changed = False
            for a, c in ints.items():
                rec = self.recs.get(a)
                b = self.attr_bits[a] if rec is None else max(self.attr_bits[a], bounded_bits(rec, c, self.bits))
                if b != self.attr_bits[a]:
                    self.attr_bits[a], changed = b, True
            if not changed:
                break
        else:
            raise Declined("an integer attribute grows without a bound the plan can hold")
        for a, b in self.attr_bits.items():
            if b > MAX_BITS:
                raise Declined(f"attribute {a!r}: an integer that may pass 38 digits")

    # ------------------------------------------------------------------ columns
    def old_col(self, a: str) -> str:
        return f"__ksn_old{self.names[a]}"

    def new_col(self, a: str) -> str:
        return f"__ksn_new{self.names[a]}"

    def start_col(self, a: str) -> str:
        """A stream step: the attribute's value before the key's first row (stored, else initial)."""
        return f"__ksn_init{self.names[a]}"

    def old_sql(self, a: str) -> str:
        if a not in self.program.updates:
            if self.state_layout is not None:
                return quote(self.start_col(a))
            return literal(self.program.initial[a]) if self.program.initial[a].value is not None else self.null(a)
        self.needs_old.add(a)
        return quote(self.old_col(a))

    def null(self, a: str) -> str:
        return null_literal(self.program.initial[a].ty)

    def define(self, name: str, sql: str) -> None:
        # the columns it reads: this module's own generated names, found in its own SQL
        self.defs[name] = (sql, set(_OWN.findall(sql)) - {name})

    def layout(self) -> list[list[tuple[str, str]]]:
        """Each defined column in the first SELECT above every column it reads."""
        depth: dict[str, int] = {}

        def layer(c: str) -> int:
            if c not in self.defs:
                return 0
            if c not in depth:
                depth[c] = 1 + max((layer(r) for r in self.defs[c][1]), default=0)
            return depth[c]

        layers: list[list[tuple[str, str]]] = [[] for _ in range(max((layer(c) for c in self.defs), default=0))]
        for c, (sql, _) in self.defs.items():
            layers[layer(c) - 1].append((c, sql))
        return layers

    def build(self) -> NativePlan:
        p = self.program
        for a, update in p.updates.items():
            self.recs[a] = classify(a, update, p.initial[a].ty)
        self.settle_bits()
        self.r = Renderer(self.old_sql, self.bits)
        self.check_bounds()
        order = self.dependency_order()
        for a in order:
            self.attribute(self.recs[a])
            # what reads the attribute's new value (the output, a later attribute) reads its column,
            # where the column holds it as the expression does (not an int widened to a float)
            if p.updates[a].ty == p.initial[a].ty:
                self.r.known[p.updates[a]] = quote(self.new_col(a))
        return self.finish()

    def window(self, frame: str | None = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", extra: str = "") -> str:
        self.regrouped = self.regrouped or bool(extra)
        return _window(self.plan, frame, extra, self.ties)

    def lags(self) -> None:
        """The previous value of each attribute something reads: the row before's new value."""
        for a in sorted(self.needs_old):
            init = self.program.initial[a]
            default = f", 1, {self.typed(init, a)}" if init.value is not None else ", 1"
            if self.state_layout is not None:
                default = f", 1, {quote(self.start_col(a))}"
            window = self.window(None)
            self.define(self.old_col(a), f"lag({quote(self.new_col(a))}{default}) OVER {window}")

    def check_bounds(self) -> None:
        """Every int the plan computes fits DECIMAL(38,0)."""
        p = self.program
        exprs = [*p.updates.values(), *(e for _, e in p.outputs or []), *(c for c, _ in p.errors)]
        for e in exprs:
            for n in walk(e):
                if n.ty == "int" and self.bits(n) > MAX_BITS:
                    raise Declined("an integer expression that may pass 38 digits")
                # (// divides DECIMAL(38,0)s, whose quotient Spark types DECIMAL(38,6): 32 digits)
                if isinstance(n, Bin) and n.op == "//" and n.ty == "int" and self.bits(n) > DIVIDE_BITS:
                    raise Declined("a floor division of an integer that may pass 32 digits")

    def typed(self, init: Const, a: str) -> str:
        s = literal(init)
        if init.ty == "int" and self.attr_bits.get(a, 0) > 62:
            return f"CAST({s} AS {DECIMAL})"
        return s

    def dependency_order(self) -> list[str]:
        deps = {a: (olds(self.recs[a].update) - {a}) & set(self.recs) for a in self.recs}
        done: list[str] = []
        visiting: set[str] = set()

        def visit(a: str, path: list[str]) -> None:
            if a in done:
                return
            if a in visiting:
                cycle = path[path.index(a) :] + [a]
                raise Declined(
                    "attributes " + " -> ".join(repr(c) for c in cycle) + " read each other's previous values"
                )
            visiting.add(a)
            for d in sorted(deps[a]):
                visit(d, path + [a])
            visiting.discard(a)
            done.append(a)

        for a in sorted(self.recs):
            visit(a, [])
        return done

    def value_sql(self, e: Expr, a: str) -> str:
        ty = self.program.initial[a].ty
        return self.r.as_type(e, ty, ty == "int" and self.attr_bits.get(a, 0) > 62)

    def tree(self, e: Expr, a: str, leaf_sql) -> str:
        if isinstance(e, If):
            then, other = self.tree(e.then, a, leaf_sql), self.tree(e.other, a, leaf_sql)
            return f"CASE WHEN {self.r.sql(e.cond)} THEN {then} ELSE {other} END"
        (leaf,) = leaves(e, a)
        return leaf_sql(leaf)

    def attribute(self, rec: Recurrence) -> None:
        a = rec.attr
        w = self.window()
        name = self.new_col(a)
        if rec.kind == "plain":
            self.define(name, self.value_sql(rec.update, a))
            return
        if rec.kind == "last":
            s = self.tree(
                rec.update,
                a,
                lambda leaf: "NULL" if leaf.kind == "keep" else f"named_struct('v', {self.value_sql(leaf.value, a)})",
            )
            self.define(name, f"coalesce(last_value({s}, TRUE) OVER {w}, named_struct('v', {self.init_sql(a)})).v")
            return
        if rec.kind == "sum":
            self.sum(rec)
            return
        self.extreme(rec)

    def init_sql(self, a: str) -> str:
        """The attribute's value before a key's first row: a stream step's start column, else
        ``__init__``'s value."""
        return quote(self.start_col(a)) if self.state_layout is not None else self.initial_sql(a)

    def initial_sql(self, a: str) -> str:
        """``__init__``'s value of the attribute, typed."""
        init = self.program.initial[a]
        return self.typed(init, a) if init.value is not None else self.null(a)

    def sum(self, rec: Recurrence) -> None:
        a, init = rec.attr, self.program.initial[rec.attr]
        ty = init.ty
        found = leaves(rec.update, a)
        resets = [leaf for leaf in found if leaf.kind == "set"]
        if ty == "float" and init.value is not None and (init.value != 0.0 or str(init.value) == "-0.0"):
            raise Declined(f"attribute {a!r}: a float sum starting from {init.value!r} (only 0.0 is planned)")
        if init.value is None and not resets:  # (with resets: an add before the first raises in Python)
            raise Declined(f"attribute {a!r}: a sum starting from None")
        zero = "0L" if ty == "int" else "CAST(0.0 AS DOUBLE)"
        d = self.tree(
            rec.update,
            a,
            lambda leaf: {"keep": "NULL", "add": None, "set": None}[leaf.kind] or self.value_sql(leaf.value, a),
        )
        w = self.window()
        start = (
            f"({self.init_sql(a)} + coalesce(sum({d}) OVER {{w}}, {zero}))"
            if ty == "int"
            else f"coalesce(sum({d}) OVER {{w}}, {self.init_sql(a)})"
        )
        if ty == "float" and self.state_layout is not None:
            start = self.float_sum_from_stored(a, d, w)
        if not resets:
            if {leaf.kind for leaf in found} == {"add"} and init.value == 0 and self.state_layout is None:
                # every row adds (a NULL add is an error row): the running sum is never NULL
                start = f"sum({d}) OVER {{w}}" if d != "1L" else "count(1) OVER {w}"
            self.define(self.new_col(a), start.format(w=w))
            return
        z = self.tree(rec.update, a, lambda leaf: "1L" if leaf.kind == "set" else "0L")
        g = f"__ksn_g{self.names[a]}"
        self.define(g, f"sum({z}) OVER {w}")
        wg = self.window(extra=f", {quote(g)}")
        value = f"CASE WHEN {quote(g)} = 0 THEN {start.format(w=wg)} ELSE sum({d}) OVER {wg} END"
        if ty == "float" and any(_may_be_negative_zero(leaf.value) for leaf in resets):
            neg = f"coalesce(CAST({d} AS STRING) = '-0.0', TRUE)"
            value = (
                f"CASE WHEN {quote(g)} > 0 AND bool_and({neg}) OVER {wg} AND sum({d}) OVER {wg} = 0 "
                f"THEN CAST('-0.0' AS DOUBLE) ELSE {value} END"
            )
        self.define(self.new_col(a), value)

    def float_sum_from_stored(self, a: str, d: str, w: str) -> str:
        """A stream step's float sum (before any reset): Python adds the stored value and the
        rows one at a time, so the stored value goes into the first row's term (Spark's running
        sum then adds in row order). A stored -0.0 stays while every term is -0.0, as in Python."""
        start = self.init_sql(a)
        c = f"__ksn_c{self.names[a]}"
        self.define(c, f"count({d}) OVER {w}")
        first = f"CASE WHEN {d} IS NOT NULL AND {quote(c)} = 1 THEN {start} + {d} ELSE {d} END"
        neg = f"coalesce(CAST({d} AS STRING) = '-0.0', TRUE)"
        return (
            f"CASE WHEN CAST({start} AS STRING) = '-0.0' AND bool_and({neg}) OVER {{w}} THEN CAST('-0.0' AS DOUBLE) "
            f"ELSE coalesce(sum({first}) OVER {{w}}, {start}) END"
        )

    def extreme(self, rec: Recurrence) -> None:
        a, init = rec.attr, self.program.initial[rec.attr]
        if init.ty == "float" and init.value is not None and init.value != init.value:
            raise Declined(f"attribute {a!r}: a running max/min that starts at NaN (Python keeps NaN)")
        v = rec.value
        assert v is not None
        agg = "max" if rec.op in (">", ">=") else "min"
        eligible = self.r.sql(rec.guard) if rec.guard is not None else "TRUE"
        if v.ty == "float":
            eligible = f"({eligible} AND NOT coalesce(isnan({self.r.sql(v)}), FALSE))"
        prev_w = self.window("ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING")
        v_sql = self.value_sql(v, a)
        wagg = f"{agg}(CASE WHEN {eligible} THEN {v_sql} END) OVER {prev_w}"
        pcol = f"__ksn_prev{self.names[a]}"
        fresh = wagg
        if rec.none_first and v.ty == "float":
            # Python takes the first value as it is: a NaN taken first stays (every `v > NaN`
            # is False); after a number, NaNs are never taken (the max of the others)
            guarded = f"CASE WHEN {self.r.sql(rec.guard) if rec.guard is not None else 'TRUE'} THEN {v_sql} END"
            first = f"first_value({guarded}, TRUE) OVER {prev_w}"
            fresh = f"CASE WHEN coalesce(isnan({first}), FALSE) THEN {NAN} ELSE {wagg} END"
        if init.value is None and self.state_layout is None:
            prev = fresh
        else:
            best = "greatest" if agg == "max" else "least"
            start = self.init_sql(a)
            prev = f"CASE WHEN ({wagg}) IS NULL THEN {start} ELSE {best}({start}, {wagg}) END"
            if v.ty == "float":  # a stored start: None takes the first value, a NaN stays
                prev = (
                    f"CASE WHEN {start} IS NULL THEN {fresh} WHEN isnan({start}) THEN {NAN} ELSE {prev} END"
                    if rec.none_first
                    else f"CASE WHEN coalesce(isnan({start}), FALSE) THEN {NAN} ELSE {prev} END"
                )
        self.define(pcol, prev)
        # the row's condition with the attribute's previous value read from the running extremum
        saved = self.r.old
        self.r.old = lambda name: quote(pcol) if name == a else saved(name)
        try:
            flag = self.r.sql(rec.update.cond)  # type: ignore[union-attr]
        finally:
            self.r.old = saved
        w = self.window()
        self.define(
            self.new_col(a),
            f"coalesce(last_value(CASE WHEN {flag} THEN named_struct('v', {self.value_sql(v, a)}) END, TRUE) OVER {w}, "
            f"named_struct('v', {self.init_sql(a)})).v",
        )

    # ------------------------------------------------------------------ output
    def finish(self) -> NativePlan:
        p, plan = self.program, self.plan
        outputs: list[tuple[str, str]] = [(k, quote(k)) for k in plan.key_columns]
        checks: list[tuple[str, str]] = []  # (condition, message) of output values out of range
        fields = list(self.returns.fields)
        if p.outputs is None:
            raise Declined("execute returns no row (only one row per input row is planned)")
        if p.outputs and p.outputs[0][0].startswith("#"):
            if len(p.outputs) != len(fields):
                raise Declined(f"execute returns {len(p.outputs)} values for {len(fields)} returns columns")
            by_name = {f.name: e for f, (_, e) in zip(fields, p.outputs)}
        else:
            by_name = dict(p.outputs)
            if set(by_name) != {f.name for f in fields}:
                raise Declined(
                    f"the returned dict's keys {sorted(by_name)} are not the returns columns {[f.name for f in fields]}"
                )
        for f in fields:
            e = by_name[f.name]
            outputs.append((f.name, self.output(f, e, checks)))
        outputs += [(c, quote(c)) for c in plan.passthrough]
        stream = self.stream_state() if self.state_layout is not None else None
        raising = self.raising(checks)
        self.lags()
        source = list(
            dict.fromkeys(
                [*plan.key_columns, *(o.column for o in plan.order), *self.field_columns(), *plan.passthrough]
            )
        )
        if stream is not None:
            source += stream.stored
        layers = [layer for layer in self.layout() if layer]
        if self.ties:
            layers.insert(0, [(SEQ, "monotonically_increasing_id()")])
        return NativePlan(plan.spec.name, layers, outputs, raising, source, stream)

    def stream_state(self) -> StreamState:
        """A stream step's start columns (the stored value, else the initial one), the key's
        last row, and the new state row over them; a wide int a typed BIGINT column cannot hold
        is an error on the key's last row (``store_checks``), as storing it is in Python."""
        keys = self.plan.key_columns
        key_ty = self.key_type() if len(keys) == 1 else None
        self.stored = stored_attributes(
            self.state_layout,
            self.program.initial,
            self.attr_bits,
            self.program.nullable,
            (keys[0], key_ty) if key_ty else None,
        )
        key = self.key_repr()
        for s in self.stored:
            for col, sql in s.helpers():
                self.define(col, sql)
            for a, read in s.starts(self.plan.spec.name, key):
                self.define(
                    self.start_col(a), f"CASE WHEN {quote(HAS_ATTRS)} THEN {read} ELSE {self.initial_sql(a)} END"
                )
        self.define(LAST, f"lead({quote(SEQ)}) OVER {self.window(None)} IS NULL")
        updated = self.program.updates
        values = {a: quote(self.new_col(a)) for s in self.stored for a in s.attrs if a in updated}

        def value(a: str) -> str:  # an attribute's new value (one execute leaves as it was: its start)
            return values.get(a, quote(self.start_col(a)))

        # a column none of whose attributes execute assigns keeps its stored bytes (a new key:
        # __init__'s value)
        kept = "CASE WHEN {has} THEN {stored} ELSE {fresh} END"
        columns = [
            (
                s.column,
                s.write_from(value)
                if any(a in values for a in s.attrs)
                else kept.format(has=quote(HAS_ATTRS), stored=quote(s.column), fresh=s.write_from(value)),
            )
            for s in self.stored
        ]
        for s in self.stored:
            if not isinstance(s, StoredAttribute):
                continue
            bad = s.out_of_range(values[s.name]) if s.name in values else None
            if bad is not None:  # the Python path's text when storing it fails
                head = p_escape(f"StateTypeError: function '{self.plan.spec.name}', key ")
                where = p_escape(f": attribute {self.state_layout.owner}.{s.name}: ")
                message = (
                    f"concat('{head}', {key}, '{where}', CAST({values[s.name]} AS STRING), ' does not fit BIGINT')"
                )
                self.store_checks.append((f"({quote(LAST)} AND {bad})", message))
        same = " AND ".join(s.same(sql, quote(s.column)) for s, (_, sql) in zip(self.stored, columns)) or "TRUE"
        return StreamState([HAS_ATTRS, *(s.column for s in self.stored)], columns, f"({same})")

    def field_columns(self) -> list[str]:
        return list(dict.fromkeys(self.plan.arg_columns))

    def output(self, f: Any, e: Expr, checks: list[tuple[str, str]]) -> str:
        t = f.type
        name = t.ddl().lower() if isinstance(t, AtomicType) else None
        where = f"column '{f.name}'"
        if e.ty == "none":
            return f"CAST(NULL AS {t.ddl()})"
        if name in _OUT_INT and e.ty == "int":
            s = self.r.sql(e)
            if self.r.wide(e) or self.bits(e) > _OUT_INT[name]:
                bad = out_of_range(s, _OUT_INT[name], self.r.wide(e))
                head = p_escape(f"{where}: ")
                checks.append((bad, f"concat('{head}', CAST({s} AS STRING), ' does not fit {t.ddl()}')"))
                return f"CASE WHEN {bad} THEN NULL ELSE CAST({s} AS {t.ddl()}) END"
            return f"CAST({s} AS {t.ddl()})"
        if name in ("double",) and e.ty in ("int", "float"):
            return self.r.as_type(e, "float")
        if isinstance(t, DecimalType) and e.ty == "int":
            # Python's Decimal(int): exact; planned where every value the class can give fits
            digits = t.precision - t.scale
            if self.bits(e) <= math.floor(digits * math.log2(10)):
                return f"CAST({self.r.sql(e)} AS {t.ddl()})"
            raise Declined(
                f"returns column '{f.name}' is {t.ddl()}: the int execute gives it may not fit its {digits} digits"
            )
        if (name, e.ty) in (
            ("boolean", "bool"),
            ("string", "str"),
            ("timestamp", "datetime"),
            ("timestamp_ntz", "datetime"),
        ):
            if name != "timestamp_ntz":
                return self.r.sql(e)
            # the instant's UTC wall clock, as the Python path writes its naive UTC datetime (a
            # CAST would take the session time zone's): epoch plus the micros, no zone involved
            micros = f"CAST(unix_micros({self.r.sql(e)}) AS DECIMAL(20,0))"
            return f"(TIMESTAMP_NTZ'1970-01-01 00:00:00' + make_dt_interval(0, 0, 0, {micros} / 1000000))"
        raise Declined(f"returns column '{f.name}' is {t.ddl()} and execute gives it a {e.ty} value")

    def raising(self, checks: list[tuple[str, str]]) -> str | None:
        """The filter keeping the rows that fail nothing and raising the first failure's message
        (a CASE) on the others, or None when nothing can fail."""
        p = self.program
        whens, conds = [], []
        head = p_escape(f"function '{self.plan.spec.name}' failed for key ")
        prefix = f"concat('{head}', {self.key_repr()}, ' on row ', {self.row_repr()}, ' (native plan): ', "
        for cond, parts in p.errors:
            text = ", ".join(self.part(x) for x in parts)
            whens.append(f"WHEN {self.r.sql(cond)} THEN {prefix}{text})")
            conds.append(self.r.sql(cond))
        # a value out of its returns column's range: the Python path's OutputSchemaError
        before = p_escape(f"OutputSchemaError: function '{self.plan.spec.name}' (key ")
        after = p_escape(f") returned a value that does not match returns ({self.returns.field_ddl()}): ")
        for cond, msg in checks:
            whens.append(
                f"WHEN {cond} THEN concat('{before}', {self.key_repr()}, ', row ', {self.row_repr()}, '{after}', {msg})"
            )
            conds.append(cond)
        for cond, msg in self.store_checks:  # (their own text: storing fails, not a row)
            whens.append(f"WHEN {cond} THEN {msg}")
            conds.append(cond)
        if not whens:
            return None
        # (a WHEN whose condition is NULL is not taken: coalesce reads NULL as not failing)
        failing = "coalesce(" + " OR ".join(f"({c})" for c in conds) + ", FALSE)"
        return f"NOT {failing} OR raise_error(CASE {' '.join(whens)} END) IS NULL"

    def part(self, x: Any) -> str:
        if isinstance(x, str):
            return "'" + p_escape(x) + "'"
        kind, e = x
        return self.repr_sql(quote(e.column), e.ty)

    def row_repr(self) -> str:
        """The row as the Python path names it in an error (``{'value': None}``; strings, ints
        and booleans as Python's repr, other values as Spark writes them)."""
        types = self.plan.arg_types or {}
        parts = []
        for i, (name, col) in enumerate(zip(self.plan.event_names, self.plan.arg_columns)):
            ddl = types.get(col, "").lower()
            ty = "str" if ddl == "string" else "bool" if ddl == "boolean" else "other"
            sep = ", " if i else ""
            parts += [f"'{p_escape(sep + repr(name) + ': ')}'", self.repr_sql(quote(col), ty)]
        return f"concat('{{', {', '.join(parts)}, '}}')" if parts else "'{}'"

    def key_type(self) -> str:
        """The Python type of the (first) key column's values: str, bool or int."""
        ddl = (self.plan.arg_types or {}).get(self.plan.key_columns[0], "").lower()
        return "str" if ddl == "string" else "bool" if ddl == "boolean" else "int"

    def key_repr(self) -> str:
        if not self.plan.key_columns:
            return "'None'"
        return self.repr_sql(quote(self.plan.key_columns[0]), self.key_type())

    @staticmethod
    def repr_sql(s: str, ty: str) -> str:
        """Python's repr of a key: a string, an integer or a boolean (the key types planned)."""
        if ty == "str":
            quoted = (
                f"CASE WHEN instr({s}, '\\'') > 0 AND instr({s}, '\"') = 0 THEN concat('\"', {s}, '\"') "
                f"ELSE concat('\\'', replace({s}, '\\'', '\\\\\\''), '\\'') END"
            )
        elif ty == "bool":
            quoted = f"CASE WHEN {s} THEN 'True' ELSE 'False' END"
        else:
            quoted = f"CAST({s} AS STRING)"
        return f"CASE WHEN {s} IS NULL THEN 'None' ELSE {quoted} END"


def p_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("'", "\\'")


def _may_be_negative_zero(e: Expr | None) -> bool:
    if e is None or e.ty != "float":
        return False
    if isinstance(e, Const):
        return str(e.value) == "-0.0"
    if isinstance(e, Bin) and e.op == "+":
        return _may_be_negative_zero(e.left) and _may_be_negative_zero(e.right)
    if isinstance(e, If):
        return _may_be_negative_zero(e.then) or _may_be_negative_zero(e.other)
    return True


def build(program: Program, plan: KeyedPlan, returns: Any, layout: Any = None) -> NativePlan:
    """``layout``: the class's AttributeLayout, for a stream step (its state stored per key).

    Rows that tie on ORDER BY: the windows order them by arrival (``SEQ``), so that windows over
    other partitions, which sort again, see them in the same order. Where every window shares
    the key's one sort (no such window, an ORDER BY, one-shot: a stream step finds a key's last
    row by ``SEQ``), the plan is built again without it: one sort key and one shuffled column
    less (W1: ~10% of its time). Ties are in an unspecified order either way (the Python path
    runs its own sort: docs/native.md)."""
    first = _Builder(program, plan, returns, layout)
    out = first.build()
    if layout is None and plan.order and not first.regrouped:
        return _Builder(program, plan, returns, layout, ties=False).build()
    return out
