"""The tables a keyed statement reads: ``keyed_state(...)`` table functions become views of the
state reader, and under ks.start / ks.run file and catalog tables become streams."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from ..engines.state_tables import read_state, read_state_changes
from .errors import KeyedQueryError, position
from .parse import STATE_TABLE_FUNCTIONS

__all__ = ["STATE_TABLE_FUNCTIONS", "Sources", "file_source", "literal", "plain_sql_guide", "view_name"]


def guide_plain_sql(spark: SparkSession, found: Any, registered: Any) -> list[str]:
    """keyed_state(...) in plain spark.sql fails with a message naming ks.sql, not Spark's
    'could not resolve a table-valued function' (where Spark's UDTFs have ``analyze``,
    ``found``: the session's features); returns what it registered."""
    from pyspark.sql.functions import udtf

    from ..compat.features import Feature

    if not found.has(Feature.UDTF_ANALYZE):
        return []
    changed = []
    for name in STATE_TABLE_FUNCTIONS:
        if name not in registered:
            spark.udtf.register(name, udtf(plain_sql_guide(name)))
            changed.append(f"UDTF {name} registered in the session (a hint naming ks.sql)")
    return changed


def plain_sql_guide(name: str) -> type:
    """A Python UDTF registered as ``name`` that only fails Spark's analysis with a message
    saying how to run ``name(...)``: the state readers need the driver's JVM, so they are
    views the rewriter makes, not functions Spark's own ``spark.sql`` can call."""
    message = (
        f"{name}('<checkpoint>', ...) is read through KeyedSQL, not plain spark.sql: run this statement with "
        "ks.sql(...) (ks = KeyedSQL(spark)), or call "
        f"ks.{'read_state' if name == 'keyed_state' else 'read_state_changes'}(checkpoint)"
    )

    class PlainSqlGuide:
        @staticmethod
        def analyze(*args: Any, **kwargs: Any) -> Any:
            raise ValueError(message)

        def eval(self, *args: Any, **kwargs: Any) -> Any:  # (never reached: analyze fails)
            raise ValueError(message)

    PlainSqlGuide.__name__ = PlainSqlGuide.__qualname__ = f"{name}_via_ks_sql"
    return PlainSqlGuide


_view_ids = itertools.count()


def view_name(kind: str) -> str:
    """A fresh internal temp view name (``__ks_<kind>_<n>``)."""
    return f"__ks_{kind}_{next(_view_ids)}"


def literal(e: exp.Expression) -> Any:
    """A SQL literal's Python value (other expressions as their SQL text)."""
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    if isinstance(e, exp.Literal):
        return e.this if e.is_string else (float(e.this) if "." in e.this else int(e.this))
    return e.sql(dialect="spark")


_STATE_TABLE_FORMS = {
    "keyed_state": ("keyed_state('<checkpoint>' [, '<function>' [, <batch id>]])", ("the batch id",)),
    "keyed_state_changes": (
        "keyed_state_changes('<checkpoint>' [, '<function>' [, <from batch> [, <to batch>]]])",
        ("the from batch", "the to batch"),
    ),
}


def state_table_args(fn: exp.Anonymous, name: str, batches: bool = True) -> list[Any]:
    """``keyed_state(...)`` / ``keyed_state_changes(...)``'s arguments as Python values: a
    checkpoint path, a function name (a string, NULL or '' for the only one), batch ids (whole
    numbers, NULL for none; ``batches=False``: none allowed). Anything else is refused naming the
    argument, its position and the form."""
    form, batch_names = _STATE_TABLE_FORMS[name] if batches else (f"{name}('<checkpoint>' [, '<function>'])", ())
    limit = 2 + len(batch_names)
    args = list(fn.expressions)
    if not args or len(args) > limit:
        at = args[limit] if len(args) > limit else fn
        raise KeyedQueryError(f"{name} takes 1 to {limit} arguments: {form}", *position(at))
    values = []
    for i, a in enumerate(args):
        what = ("the checkpoint path", "the function name", *batch_names)[i]
        number = a.this if isinstance(a, exp.Cast) and isinstance(a.this, exp.Literal) else a  # (3L)
        value = literal(number) if isinstance(number, (exp.Literal, exp.Null)) else a
        if i >= 2 and isinstance(value, str) and value.strip().isdigit():  # ('3': as it was read before)
            value = int(value)
        if i == 0:
            ok = isinstance(value, str) and value.strip() != ""
        elif i == 1:
            ok = value is None or isinstance(value, str)
        else:
            ok = value is None or (type(value) is int and value >= 0)
        if not ok:
            shown = a.sql(dialect="spark")
            raise KeyedQueryError(
                f"{name}: argument {i + 1} ({what}) must be "
                + ("a string literal" if i < 2 else "a whole number of 0 or more")
                + f", got {shown}: {form}",
                *position(a),
            )
        values.append(value)
    return values


def _q(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


class Sources:
    """The source tables of one statement (streams made once per table and statement)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.stream_views: dict[str, str] = {}

    def replace_keyed_state(self, tree: exp.Expression) -> None:
        """``FROM keyed_state('<checkpoint>' [, '<function>' [, <batch id>]])`` (and
        ``keyed_state_changes``) -> a temp view of the state reader."""
        for table in list(tree.find_all(exp.Table)):
            fn = table.this
            name = str(fn.this).lower() if isinstance(fn, exp.Anonymous) else ""
            if name not in ("keyed_state", "keyed_state_changes"):
                continue
            args = state_table_args(fn, name)
            function = args[1] if len(args) > 1 and args[1] not in (None, "") else None
            # named by what it reads, not by a counter: the statement's text, which a checkpoint
            # seeded by INITIAL STATE FROM records, is the same on every run
            view = "__ks_state_" + hashlib.sha1(repr((name, args)).encode()).hexdigest()[:16]
            if name == "keyed_state":
                batch = args[2] if len(args) > 2 else None
                read_state(self.spark, args[0], function, batch).createOrReplaceTempView(view)
            else:
                lo = args[2] if len(args) > 2 else None
                hi = args[3] if len(args) > 3 else None
                read_state_changes(self.spark, args[0], function, lo, hi).createOrReplaceTempView(view)
            table.set("this", _q(view))
            if table.args.get("alias") is None:
                table.set("alias", exp.TableAlias(this=_q(name)))

    def streamify(self, base: exp.Select, max_files: Any = None) -> None:
        """ks.start / ks.run: file and catalog tables of the source become streaming reads
        (``max_files_per_trigger`` caps the files each micro-batch takes). A name a ``WITH``
        of the source defines is its CTE, not a table: what the CTE reads is streamed instead."""
        ctes = {cte.alias_or_name.lower() for cte in base.find_all(exp.CTE)}
        for stream in list(base.find_all(exp.Stream)):  # `FROM STREAM t`: streamed here like any table
            if isinstance(stream.this, exp.Table):
                stream.replace(stream.this)
        for table in list(base.find_all(exp.Table)):
            if not table.db and not table.catalog and table.name.lower() in ctes:
                continue
            _refuse_what_a_stream_cannot_read(table)
            fmt = table.db.lower() if table.db else ""
            if fmt in ("parquet", "json", "csv", "orc") and not table.catalog:
                path = table.name
                view = self._file_stream(
                    f"{fmt}:{path}:{max_files}",
                    fmt,
                    {},
                    lambda f=fmt, p=path: getattr(self.spark.read, f)(p).schema,
                    path,
                    max_files,
                )
                alias = table.args.get("alias") or exp.TableAlias(this=_q(path.rsplit("/", 1)[-1] or "src"))
            elif not table.db and self._is_temp_view(table.name):
                batch = self.spark.table(table.name)
                source = None if batch.isStreaming else file_source(batch)
                if source is None:
                    continue  # already a streaming temp view (or not a file source: refused later)
                fmt, options, path = source
                view = self._file_stream(
                    f"view:{table.name.lower()}:{max_files}", fmt, options, lambda b=batch: b.schema, path, max_files
                )
                alias = table.args.get("alias") or exp.TableAlias(this=_q(table.name))
            else:
                view = view_name("stream")
                name = exp.Table(this=table.this, db=table.args.get("db"), catalog=table.args.get("catalog"))
                self.spark.readStream.table(name.sql(dialect="spark")).createOrReplaceTempView(view)  # (no alias)
                alias = table.args.get("alias") or exp.TableAlias(this=_q(table.name))
            table.replace(exp.Table(this=_q(view), alias=alias))

    def _file_stream(self, key: str, fmt: str, options: dict[str, str], schema: Any, path: str, max_files: Any) -> str:
        """A streaming temp view over ``path``'s files (made once per key): ``schema()`` gives
        the schema, ``max_files`` caps the files each micro-batch takes."""
        if key not in self.stream_views:
            reader = self.spark.readStream.format(fmt).options(**options).schema(schema())
            if max_files is not None:
                reader = reader.option("maxFilesPerTrigger", int(max_files))
            view = view_name("stream")
            reader.load(path).createOrReplaceTempView(view)
            self.stream_views[key] = view
        return self.stream_views[key]

    def _is_temp_view(self, name: str) -> bool:
        try:
            return any(t.name.lower() == name.lower() and t.isTemporary for t in self.spark.catalog.listTables())
        except Exception:  # noqa: BLE001 - catalog listing failures just mean "not a temp view"
            return False


# a table's clauses a streaming read has no counterpart for (the stream reads the whole table
# as it grows): refused by name rather than left out
_NOT_STREAMED = {
    "version": "time travel (VERSION / TIMESTAMP AS OF)",
    "system_time": "time travel",
    "when": "time travel",
    "changes": "CHANGES",
    "sample": "TABLESAMPLE",
    "partition": "a PARTITION (...) of the table",
    "pivots": "PIVOT",
}


def _refuse_what_a_stream_cannot_read(table: exp.Table) -> None:
    for arg, what in _NOT_STREAMED.items():
        if table.args.get(arg):
            raise KeyedQueryError(
                f"{what} on {table.sql(dialect='spark')}: ks.run and ks.start read their source as a stream, "
                "the whole table as it grows, and a streaming read takes no such clause; filter the rows in WHERE, "
                "or read a fixed version of the table with ks.sql",
                *position(table),
            )


def file_source(df: DataFrame) -> tuple[str, dict[str, str], str] | None:
    """A batch DataFrame that is exactly one file relation (e.g. a view made by ``CREATE
    TEMPORARY VIEW v USING csv OPTIONS (path ...)`` or ``spark.read.csv(path)``): its format,
    reader options and path, so ks.start / ks.run can read the same files as a stream."""
    try:
        node = df._jdf.queryExecution().analyzed()
        while node.children().size() == 1 and node.getClass().getSimpleName() in ("SubqueryAlias", "View", "Project"):
            node = node.children().head()
        if node.getClass().getSimpleName() != "LogicalRelation":
            return None
        rel = node.relation()
        if rel.getClass().getSimpleName() != "HadoopFsRelation" or rel.location().rootPaths().size() != 1:
            return None
        fmt = rel.fileFormat().shortName()
        opts = rel.options()
        options = {k: opts.apply(k) for k in _scala_keys(opts) if k.lower() not in ("path", "paths", "inferschema")}
        root = rel.location().rootPaths().head()
        conf = df.sparkSession._jsc.hadoopConfiguration()
        if root.getFileSystem(conf).getFileStatus(root).isFile():
            # one file: Spark streams only directories, so stream its directory filtered to it
            options["pathGlobFilter"] = "".join("\\" + c if c in "[]{}*?\\" else c for c in root.getName())
            return fmt, options, root.getParent().toString()
        return fmt, options, root.toString()
    except Exception:  # noqa: BLE001 - any other plan shape (or Spark Connect): not a plain file source
        return None


def _scala_keys(scala_map: Any) -> list[str]:
    it = scala_map.keys().iterator()
    out = []
    while it.hasNext():
        out.append(str(it.next()))
    return out
