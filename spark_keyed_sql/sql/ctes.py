"""The CTEs a part of a statement may name, gathered into one WITH for a query of its own (a
keyed select's source, a table argument whose columns are looked up)."""

from __future__ import annotations

from sqlglot import exp

__all__ = ["ctes_visible_from"]


def ctes_visible_from(node: exp.Expression) -> exp.With | None:
    """The CTEs ``node`` may name: those of every WITH on it or around it (the statement's, an
    INSERT's, a CREATE ... AS's, a subquery's, its own), outermost first, each up to the CTE
    ``node`` itself is in; copies, as one WITH (None when there are none)."""
    chain, inside, at = [], set(), node
    while at is not None:
        inside.add(id(at))
        w = at.args.get("with_")
        if isinstance(w, exp.With):
            chain.append(w)
        at = at.parent
    ctes = []
    for w in reversed(chain):
        for cte in w.expressions:
            if id(cte) in inside:
                break
            ctes.append(cte.copy())
    if not ctes:
        return None
    recursive = any(w.args.get("recursive") for w in chain)  # (WITH RECURSIVE: its CTEs may read themselves)
    return exp.With(expressions=_unshadowed(ctes), recursive=recursive or None)


def _unshadowed(ctes: list[exp.CTE]) -> list[exp.CTE]:
    """The CTEs of nested WITHs as one WITH (Spark refuses a name twice in one): a definition an
    inner WITH makes again is renamed, and each CTE's body reads the definitions before it, as it
    did in its own WITH (``WITH x AS (SELECT * FROM x)`` inside reads the outer ``x``)."""
    names = [c.alias_or_name.lower() for c in ctes]
    if len(set(names)) == len(names):
        return ctes
    latest: dict[str, str] = {}  # a name -> the CTE it means so far
    for i, (cte, name) in enumerate(zip(ctes, names)):
        for table in cte.this.find_all(exp.Table):
            if not table.db and not table.catalog and table.name.lower() in latest:
                table.set("this", exp.to_identifier(latest[table.name.lower()], quoted=True))
        own = f"__ks_cte{i}_{name}" if name in names[i + 1 :] else cte.alias_or_name
        if own != cte.alias_or_name:
            cte.set("alias", exp.TableAlias(this=exp.to_identifier(own, quoted=True)))
        latest[name] = own
    return ctes
