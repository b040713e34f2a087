"""``ks.migrate_state``: rewrite a checkpoint's keyed state into a new checkpoint that continues
from the same input position (Flink's State Processor "modify" role).

The state is read as a table (``read_state``, through the layout of the engine that wrote
it), optionally transformed with SQL over a view named ``state``, and written by the migration
target engine's layout, which checks it against the target function's state (missing
attributes take their ``__init__`` value, extra columns are refused, types are cast where the
cast is lossless) and commits it at the source's last committed batch. Spark's own position
files (offsets, commits, sources, metadata) are copied first, so the new checkpoint's next
batch is the source checkpoint's next batch: nothing re-read, nothing skipped.

With no transform, the state goes as a restart of the target class carries it (declared renames
and converters; into the same function, state the class no longer has dropped).

``dry_run=True`` runs the same reads and checks and, instead of writing, returns the state of a
sample of keys before and after side by side (what the target engine would write, as
``read_state`` would show it): nothing is created at the destination.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .api.errors import UnknownFunctionError
from .compat.exceptions import first_line
from .compat.names import named
from .engines import LEGACY_ENGINE, get_engine, migration_target
from .runtime.columns import quote
from .runtime.spec import FunctionSpec
from .sql.parse import without_trailing_semicolons
from .sql.sources import view_name
from .state.checkpoint import (
    CheckpointError,
    CheckpointMeta,
    MigrationError,
    OperatorRecord,
    read_metadata,
    write_metadata,
)
from .state.evolution import Change, StoredField, change_of, fields_of_record, value_converter
from .state.filesystems import filesystem
from .state.fs import join
from .streaming.checkpoints import function_record
from .streaming.queries import checkpoint_lease

__all__ = ["MigrationError", "SPARK_POSITION_FILES", "migrate_checkpoint", "migrate_state"]

log = logging.getLogger(__name__)

# a destination with files and no metadata: what a migration killed part way leaves (one that
# fails removes its files itself)
_UNFINISHED = (
    " (it holds no spark-keyed-sql checkpoint: if a migrate_state into it was killed part way, remove the "
    "directory and migrate again)"
)

SPARK_POSITION_FILES = ("offsets", "commits", "sources", "metadata")


def migrate_checkpoint(
    spark: SparkSession,
    src: str,
    dst: str,
    registered: Callable[[str], FunctionSpec],
    function: str | None = None,
    to_function: str | None = None,
    transform: str | Callable[[DataFrame], DataFrame] | None = None,
    partitions: int | None = None,
    dry_run: bool = False,
    sample: int = 20,
) -> dict[str, Any] | DataFrame:
    """``ks.migrate_state``: the target is the registration of ``to_function``, else of the
    function the source holds (``function``, or its first)."""
    meta = read_metadata(src, spark)
    source_fn = function or (meta.operators[0].function if meta and meta.operators else None)
    if not (to_function or source_fn):
        raise CheckpointError(
            f"migrate_state: {src!r} holds no keyed query's checkpoint (no metadata of this "
            "project there); check the path, or name the function with function= / to_function="
        )
    try:
        target = registered(to_function or source_fn)
    except UnknownFunctionError as exc:
        op = meta.operator(source_fn) if meta and source_fn and not to_function else None
        cls = f" (its class when the checkpoint was written: {op.class_name})" if op and op.class_name else ""
        raise UnknownFunctionError(
            f"{exc}. A migration writes the state as the target function's class declares it, so that class is "
            f"registered first{cls}: ks.register('{to_function or source_fn}', <class>), or on the command line "
            f"--udf {to_function or source_fn}=module:Class"
        ) from None
    return migrate_state(
        spark,
        src,
        dst,
        target,
        function=function,
        transform=transform,
        partitions=partitions,
        dry_run=dry_run,
        sample=sample,
        meta=meta,
    )


def migrate_state(
    spark: SparkSession,
    src: str,
    dst: str,
    target: FunctionSpec,
    *,
    function: str | None = None,
    transform: str | Callable[[DataFrame], DataFrame] | None = None,
    partitions: int | None = None,
    dry_run: bool = False,
    sample: int = 20,
    meta: CheckpointMeta | None = None,
) -> dict[str, Any] | DataFrame:
    """Migrate ``src``'s state into ``dst`` as ``target``'s; with ``dry_run``, every check and no
    write: a DataFrame of the ``sample`` smallest keys, the key columns, ``old`` and ``new``
    (structs of the state columns before and as written; NULL where that side has no row).
    ``meta``: ``src``'s record, when the caller read it already (read once per migration)."""
    fs = filesystem(spark)
    fs.probe(src)
    fs.probe(dst, "destination checkpoint")
    meta = meta if meta is not None else read_metadata(src, spark)
    if meta is None:
        raise MigrationError(
            f"checkpoint {src!r} has no spark-keyed-sql metadata (was it written by ks.start / ks.run?)"
        )
    ops = meta.operators
    if function is None and len(ops) > 1:
        raise MigrationError(
            f"checkpoint {src!r} holds several functions {[o.function for o in ops]}; pass function=..."
        )
    op = ops[0] if function is None else meta.operator(function)
    if op is None:
        raise MigrationError(f"checkpoint {src!r} has no function {function!r}")
    if fs.list(dst):
        raise MigrationError(
            f"destination checkpoint {dst!r} is not empty; migrate into a new directory" + _unfinished_hint(spark, dst)
        )
    if partitions is not None and partitions < 1:
        raise MigrationError(f"partitions must be a positive number, got {partitions}")
    if dry_run and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise MigrationError(f"sample must be a positive number of keys, got {sample!r}")
    where = f"migrate_state({src!r} -> {dst!r}, function '{target.name}')"
    copied = [name for name in SPARK_POSITION_FILES if fs.exists(join(src, name))]
    if copied and not fs.names_files:
        raise MigrationError(
            f"{where}: not possible through Spark Connect. The migrated checkpoint continues from the source's input "
            f"position, which lives in Spark's own checkpoint files ({', '.join(copied)}), files Spark reads by exact "
            "name; a Connect session reaches files only through DataFrame writers, which write directories of "
            "part-files, never a file of a given name (see docs/operations.md). Migrate from a classic SparkSession "
            "(e.g. a job on the cluster); reading the state (ks.read_state) and bootstrapping a new query from it "
            "(INITIAL STATE FROM) work on Connect"
        )
    # the source's lease for the whole copy: a query running on it would commit a batch between
    # reading its state and copying Spark's position files (that batch's input skipped); a
    # running one refuses here, naming itself (a dry run only reads, as read_state does)
    with _source_lease(spark, src, dry_run):
        source_layout = get_engine(op.engine_or(LEGACY_ENGINE)).layout
        position = source_layout.position(spark, src, op)

        old = source_layout.read(spark, src, ops.index(op), op, None).drop("batch_id")  # (read_state's, by the record)
        timers = source_layout.timers(spark, src, op, position.version)
        if timers is None and target.has_timers:
            raise MigrationError(
                f"{where}: {target.cls.__name__} uses timers, and timers registered in this checkpoint "
                f"(engine '{op.engine_or(LEGACY_ENGINE)}') are not readable as a table; let them fire first, or "
                "bootstrap a new query with INITIAL STATE FROM"
            )
        target_op = function_record(target, target.name, op.keys, migration_target().name, op.initial_state)
        carried = old if _has_transform(transform) else _as_the_class_carries(old, op, target_op, target, where)
        with _transformed(spark, carried, transform, where) as state:
            lower = {c.lower() for c in state.columns}
            missing_keys = [k for k in op.keys if k.lower() not in lower]
            if missing_keys:
                raise MigrationError(
                    f"{where}: key column(s) {missing_keys} missing from the state "
                    f"(columns: {', '.join(state.columns)})"
                )

            # the state's files, then Spark's position files, then the state's commit and our metadata:
            # a destination without a commit is not a checkpoint anyone continues from
            def copy_positions() -> None:
                for name in SPARK_POSITION_FILES:
                    if fs.exists(join(src, name)):
                        fs.copy(join(src, name), join(dst, name))

            engine = migration_target()
            if dry_run:
                new = engine.layout.preview(spark, op, target, state, where)
                log.info("%s: dry run over the %d smallest key(s), nothing written", where, sample)
                return _side_by_side(spark, list(op.keys), old, new, sample)
            log.info(
                "%s: from batch %d of engine '%s'%s, into engine '%s'",
                where,
                position.version,
                op.engine_or(LEGACY_ENGINE),
                " through the transform" if transform else "",
                engine.name,
            )
            made = not fs.exists(dst)
            fs.mkdirs(dst)
            try:
                written = engine.layout.write(
                    spark, dst, op, target, state, timers, position, partitions, where, copy_positions
                )
                # the target class's layout: the state was written in it (a record keeping the
                # source's would have the next run refuse a type the transform changed)
                new_op = replace(target_op, partitions=partitions)
                write_metadata(dst, [new_op if o is op else o for o in ops], spark)
            except BaseException:
                _remove_partial(fs, dst, made, where)
                raise
            log.info(
                "%s: %d key(s) in %d partition(s), continuing after batch %d",
                where,
                written["keys"],
                written["partitions"],
                position.version,
            )
            return {
                "keys": written["keys"],
                "batch_id": position.version,
                "spark_batch": position.spark_batch,
                "partitions": written["partitions"],
            }


def _has_transform(transform: Any) -> bool:
    return not (transform is None or (isinstance(transform, str) and not transform.strip()))


def _as_the_class_carries(
    state: DataFrame, op: OperatorRecord, target_op: OperatorRecord, target: FunctionSpec, where: str
) -> DataFrame:
    """With no ``transform``: ``state`` (``read_state``'s columns, as ``op`` records them) as a
    restart of the target class carries it (``state/evolution.py``): a declared rename takes its
    former name's column, a declared converter converts a type change that is not a widening,
    and, into the same function, a state column its class no longer has is dropped (logged;
    into another function it is refused, by the target's layout, as a transform's extra column
    is: likely the wrong function). Types are cast (checked) later,
    by the target engine's layout, as for a transform's output."""
    renames, converters = target.renames, target.converters
    old_attrs, old_vars = fields_of_record(op)
    new_attrs, new_vars = fields_of_record(target_op)
    was = {f.name.lower(): f for f in old_attrs + old_vars}
    now = {f.name.lower(): f for f in new_attrs + new_vars}
    columns = {c.lower(): c for c in state.columns}
    keys = {k.lower() for k in op.keys}
    out, dropped = [], []
    taken = {old.lower() for new, old in renames.items() if new.lower() not in columns and old.lower() in columns}
    same_function = target.name.lower() == op.function.lower()  # (SQL names: any case)
    for c in state.columns:
        low = c.lower()
        if low in keys:
            out.append(named(c))
        elif low in taken:
            continue  # (its values go under the new name, below)
        elif low in now:
            out.append(_converted(named(c), was.get(low), now[low], converters, target.name))
        elif same_function:
            dropped.append(c)
        else:
            out.append(named(c))  # (refused by name when written)
    for new, old in renames.items():
        if old.lower() in taken and new.lower() in now:
            out.append(
                _converted(
                    named(columns[old.lower()]), was.get(old.lower()), now[new.lower()], converters, target.name
                ).alias(new)
            )
    if dropped:
        log.warning("%s: %s has no state %s; their values are not migrated", where, target.cls.__name__, dropped)
    return state.select(*out)


def _converted(
    col: Column, was: StoredField | None, now: StoredField, converters: dict[str, Any], function: str
) -> Column:
    """``col`` through the class's converter of ``now`` when its stored type changed other
    than by widening (the cast that follows does a widening), else as it is."""
    fn = converters.get(now.name)
    change = Change.SAME if fn is None or was is None else change_of(was, now, has_converter=True)
    if change in (Change.SAME, Change.WIDENED):
        return col.alias(now.name)
    if change is Change.REFUSED:  # (a restart refuses it too: state/evolution.change_of)
        assert was is not None
        raise MigrationError(
            f"{function}: '{now.name}' is stored as {was.describe()} and the class declares {now.describe()}; its "
            "converter converts the values of one kind of state, not a ValueState into a ListState or a map's keys. "
            "Rewrite it with transform= (SQL over the state as read_state shows it)"
        )
    stored_type = T.StringType() if now.encoded else now.type
    if now.kind == "list":
        stored_type = T.ArrayType(stored_type)
    elif now.kind == "map":
        stored_type = T.MapType(now.key_type or T.StringType(), stored_type)
    return F.udf(value_converter(function, was, now, fn), stored_type)(col).alias(now.name)


@contextmanager
def _source_lease(spark: SparkSession, src: str, dry_run: bool) -> Iterator[None]:
    """Holding the source's lease (none for a dry run, or for a source this session can only
    read: a backup copy, a read-only bucket, where no query writes either); a query holding it
    refuses the migration."""
    lock = None
    if not dry_run:
        try:
            lock = checkpoint_lease(spark, src, "migrate_state")
        except CheckpointError:
            raise  # (held by a running query: named in the message)
        except Exception as exc:  # noqa: BLE001 - a lease that cannot be written: the source is read-only here
            log.warning("migrate_state: no lease taken on %s (%s); reading it as it is", src, first_line(str(exc)))
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def _unfinished_hint(spark: SparkSession, dst: str) -> str:
    try:
        return "" if read_metadata(dst, spark) is not None else _UNFINISHED
    except CheckpointError:  # a checkpoint, if a damaged one
        return ""


def _remove_partial(fs: Any, dst: str, made: bool, where: str) -> None:
    """A migration that failed leaves ``dst`` as it found it (absent, or an empty directory), so
    that the same call can be made again; it was empty before, so whatever is in it is ours."""
    try:
        if made:
            fs.delete(dst)
        else:
            for name in fs.list(dst):
                fs.delete(join(dst, name))
    except Exception as e:  # noqa: BLE001 - the migration's own error is the one to raise
        log.warning(
            "%s failed, and its partial files in %s could not be removed (%s): remove them before migrating "
            "into that directory again",
            where,
            dst,
            first_line(e),
        )
    else:
        log.info("%s failed: its partial files in %s were removed", where, dst)


def _side_by_side(spark: SparkSession, keys: list[str], old: DataFrame, new: DataFrame, sample: int) -> DataFrame:
    """The ``sample`` smallest keys (key order) of ``old`` and ``new`` (key columns, then state
    columns): the key columns, then ``old`` and ``new``, each a struct of that side's state columns,
    NULL where that side has no row of the key (the transform dropped or added it). Collected here,
    while the transform's view exists, and handed back as a local DataFrame: the rows the caller
    sees are the ones checked, however often it is read."""

    def side(df: DataFrame, name: str) -> DataFrame:
        key_lower = {k.lower() for k in keys}
        state_cols = ", ".join(quote(c) for c in df.columns if c.lower() not in key_lower)
        return df.selectExpr(
            *[f"{quote(k)} AS __ks_{name}_key{i}" for i, k in enumerate(keys)], f"struct({state_cols}) AS {name}"
        )

    o, n = side(old, "old"), side(new, "new")
    on = [o[f"__ks_old_key{i}"].eqNullSafe(n[f"__ks_new_key{i}"]) for i in range(len(keys))]
    both = o.join(n, on, "full").selectExpr(
        *[f"coalesce(__ks_old_key{i}, __ks_new_key{i}) AS __ks_key{i}" for i in range(len(keys))], "old", "new"
    )
    first = both.orderBy(*[f"__ks_key{i}" for i in range(len(keys))]).limit(sample)
    out = first.selectExpr(*[f"__ks_key{i} AS {quote(k)}" for i, k in enumerate(keys)], "old", "new")
    return spark.createDataFrame(out.collect(), out.schema)


# Spark's "line 3 pos 16" / "(line 3, pos 16)" of the wrapped query; its first lines are ours
_SPARK_POS = re.compile(r"line (\d+),? pos (\d+)")
_WRAP_LINES = 2


@contextmanager
def _transformed(spark: SparkSession, state: DataFrame, transform: Any, where: str) -> Iterator[DataFrame]:
    """``transform`` run over the state, which it names ``state``: a CTE of that name over a view
    of this call's own (dropped after), so a user's table or view called ``state`` is neither read
    nor replaced."""
    if not _has_transform(transform):
        yield state
        return
    if callable(transform):  # a DataFrame -> DataFrame function: the state in, the new state out
        out = transform(state)
        if not (hasattr(out, "schema") and hasattr(out, "columns")):
            raise MigrationError(
                f"{where}: transform= was given a function; it must return the new state as a DataFrame, got "
                f"{type(out).__name__}"
            )
        yield out
        return
    if not isinstance(transform, str):
        raise MigrationError(
            f"{where}: transform= takes SQL text over the view 'state' (\"SELECT ... FROM state\") or a function "
            f"DataFrame -> DataFrame, got {type(transform).__name__}"
        )
    view = view_name("migrate_state")
    state.createOrReplaceTempView(view)
    body = without_trailing_semicolons(transform)
    try:
        try:  # the newline before ")" ends a trailing "-- comment" of the user's text
            out = spark.sql(f"WITH state AS (SELECT * FROM {view})\nSELECT * FROM (\n{body}\n)")
        except AnalysisException as e:  # ParseException is one too

            def user_pos(m: re.Match) -> str:
                line = int(m.group(1)) - _WRAP_LINES
                if not 1 <= line <= len(body.splitlines()):  # the wrapper's own ")": the text ended early
                    return "at the end of transform="
                return f"line {line}, column {int(m.group(2)) + 1} of transform="

            message = _SPARK_POS.sub(user_pos, first_line(e)).replace(view, "state")
            raise MigrationError(f"{where}: transform= failed: {message}") from None
        yield out
    finally:
        spark.catalog.dropTempView(view)
