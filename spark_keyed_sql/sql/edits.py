"""``DELETE FROM keyed_state(...) WHERE ...`` and ``UPDATE keyed_state(...) SET ... WHERE ...``:
the parsed statement (sqlglot's Spark dialect reads both; the table is the ``keyed_state``
call) as what to edit, and what ``EXPLAIN KEYED`` says of it. Runs nothing: the edit is the
engine's (``StateLayout.edit``), under the checkpoint's lease (``state_edits.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from .errors import KeyedQueryError, position
from .expressions import without_first_part
from .parse import render
from .sources import state_table_args

__all__ = ["StateEdit", "explain_edit", "state_edit"]

_FORMS = (
    "DELETE FROM keyed_state('<checkpoint>' [, '<function>']) WHERE <predicate>, or UPDATE "
    "keyed_state('<checkpoint>' [, '<function>']) SET <column> = <expr>, ... WHERE <predicate>"
)


@dataclass(frozen=True)
class StateEdit:
    """One DELETE / UPDATE of a checkpoint's keyed state: ``where`` and each assignment's
    expression are Spark SQL text over the columns ``read_state`` shows."""

    kind: str  # "delete" | "update"
    checkpoint: str
    function: str | None
    where: str
    assignments: tuple[tuple[str, str], ...] = ()

    @property
    def verb(self) -> str:
        return self.kind.upper()


def _mentions_keyed_state(tree: exp.Expression) -> bool:
    return any((f.name or "").lower() in ("keyed_state", "keyed_state_changes") for f in tree.find_all(exp.Anonymous))


def _unqualified(node: exp.Expression, table: exp.Table, verb: str) -> exp.Expression:
    """``node`` with the edited table's alias (``DELETE FROM keyed_state(...) s WHERE
    s.user_id = ...``) taken off its columns; any other qualifier stays (``profile.country``:
    a field of the state column ``profile``)."""
    alias = (table.alias or "").lower()
    node = node.copy()
    if not alias:
        return node
    for col in list(node.find_all(exp.Column)):
        if col.find_ancestor(exp.Subquery, exp.Select) is not None:
            continue
        if len(col.parts) > 1 and col.parts[0].name.lower() == alias:
            col.replace(without_first_part(col))
    return node


def state_edit(tree: exp.Expression) -> StateEdit | None:
    """The edit a parsed DELETE / UPDATE of ``keyed_state(...)`` asks for; None for any other
    statement. A DELETE / UPDATE that names ``keyed_state`` in another way is refused."""
    if not isinstance(tree, (exp.Delete, exp.Update)):
        return None
    verb = "DELETE" if isinstance(tree, exp.Delete) else "UPDATE"
    table = tree.this
    fn = table.this if isinstance(table, exp.Table) else None
    if not (isinstance(fn, exp.Anonymous) and (fn.name or "").lower() == "keyed_state"):
        if _mentions_keyed_state(tree) or (isinstance(table, exp.Table) and table.name.lower() == "keyed_state"):
            raise KeyedQueryError(f"{verb} of keyed state is written {_FORMS}")
        return None
    if len(fn.expressions) > 2:
        raise KeyedQueryError(
            f"{verb} of keyed state names a checkpoint and, when it holds several functions, one of them: {_FORMS} "
            "(an edit applies to the newest state; no batch id)",
            *position(fn.expressions[2]),
        )
    args = state_table_args(fn, "keyed_state", batches=False)
    extra = [k for k in ("with_", "using", "from_", "returning", "order", "limit", "options") if tree.args.get(k)]
    if extra or (isinstance(tree, exp.Delete) and tree.args.get("tables")):
        raise KeyedQueryError(f"{verb} of keyed state takes only a WHERE clause ({_FORMS})")
    where = tree.args.get("where")
    if where is None:
        raise KeyedQueryError(
            f"{verb} of keyed state needs a WHERE predicate over its key and state columns (to edit every key "
            "write WHERE true)"
        )
    where = _unqualified(where, table, verb)
    assignments: list[tuple[str, str]] = []
    if isinstance(tree, exp.Update):
        for a in tree.expressions:
            a = _unqualified(a, table, verb)
            if not (isinstance(a, exp.EQ) and isinstance(a.this, exp.Column) and not a.this.table):
                raise KeyedQueryError(
                    f"UPDATE of keyed state: SET takes <column> = <expr>, got {render(a)}", *position(a)
                )
            assignments.append((a.this.name, render(a.expression)))
        if not assignments:
            raise KeyedQueryError(f"UPDATE of keyed state needs SET <column> = <expr> ({_FORMS})")
        names = [n.lower() for n, _ in assignments]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise KeyedQueryError(f"UPDATE of keyed state sets column(s) {twice} twice")
    function = args[1] if len(args) > 1 and args[1] != "" else None
    return StateEdit(
        "delete" if verb == "DELETE" else "update", args[0], function, render(where.this), tuple(assignments)
    )


def explain_edit(edit: StateEdit, engine: str | None, unavailable: str | None = None, several: bool = False) -> str:
    """What EXPLAIN KEYED says of a DELETE / UPDATE of keyed state; ``unavailable``: why this
    session could not run it; ``several``: the edit names no function and the checkpoint has several."""
    unnamed = "(none named, and the checkpoint holds several: name one)" if several else "(its only one)"
    lines = [
        "== Keyed state edit ==",
        f"{edit.verb} the keyed state of checkpoint {edit.checkpoint!r}, function "
        + (repr(edit.function) if edit.function else unnamed),
        f"    engine:    {repr(engine) if engine else '(no keyed checkpoint there)'}",
        f"    where:     {edit.where}",
    ]
    if edit.assignments:
        lines.append(f"    set:       {', '.join(f'{c} = {e}' for c, e in edit.assignments)}")
    what = (
        "the matching keys' state and timers, from every file of the checkpoint"
        if edit.kind == "delete"
        else "the matching keys' state is rewritten; their old values are removed from every file of the checkpoint"
    )
    lines += [
        f"    effect:    {what} (newest version, older snapshots and deltas, so the change feed; the local "
        "state caches); the history before the edit is dropped",
        "    runs:      "
        + (
            f"NOT from this session: {unavailable}"
            if unavailable
            else "by the query holding the checkpoint, at its next batch boundary (or at once under the checkpoint's "
            "lease when none runs); returns one audit row"
        ),
    ]
    return "\n".join(lines)
