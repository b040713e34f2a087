"""Feeding the state partitions a step's local stores missed (their store gone or behind):
CATCH_UP with the deltas since a committed state the store holds, else FULL, all of the
partition's state, read from the checkpoint (``BulkStream.run_jobs`` runs such partitions again
with these rows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ...state.commit_record import CommitRecord, StoreToken
from ...state.snapshots import SnapshotStore
from .layout import state_frame
from .records import Feed

__all__ = ["FeedPlan", "plan_feeds"]


@dataclass(frozen=True)
class FeedPlan:
    """How each missed state partition is fed: its :class:`Feed`, and for CATCH_UP the tokens of
    the committed states its retained deltas lead on from (``{version: token}``)."""

    feeds: dict[int, Feed]
    catch_up: dict[int, dict[int, str]]
    since: int = -1  # CATCH_UP reads the deltas after this version (the oldest a fed store holds)

    def partitions(self, feed: Feed) -> list[int]:
        return sorted(p for p, f in self.feeds.items() if f is feed)

    def rows(self, spark: SparkSession, store: SnapshotStore, prev: CommitRecord | None) -> DataFrame | None:
        """The checkpoint's rows for the fed partitions: all their state for FULL, the deltas
        after ``since`` for CATCH_UP (each with its version: the newest row of a key wins)."""
        if prev is None:
            return None
        frames = []
        full, catch = self.partitions(Feed.FULL), self.partitions(Feed.CATCH_UP)
        if full:
            frames.append(state_frame(spark, store, prev, parts=full, versions=True))
        if catch:
            frames.append(
                state_frame(spark, store, prev, parts=catch, versions=True, deltas_only=True, since=self.since)
            )
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f)
        return out


def plan_feeds(
    store: SnapshotStore, prev: CommitRecord | None, evolved: CommitRecord | None, missed: dict[int, str], final: bool
) -> FeedPlan:
    """How to feed each missed partition (``missed``: partition -> the token of the state its
    store holds): CATCH_UP when the store holds a committed state the retained deltas lead on
    from (any of them: the job may run on another host), else FULL (always when ``final``, a
    later job: it cannot miss)."""
    if prev is None or prev is evolved:
        return FeedPlan({p: Feed.FULL for p in missed}, {})  # an evolved state: no local store holds it
    # a store holding a commit of another state layout (a class changed since) is fed in full
    usable = {
        c.version: c
        for c in store.commits()
        if c.version >= prev.base_version and c.schema is not None and _same_shape(c.schema, prev.schema)
    }
    feeds: dict[int, Feed] = {}
    catch_up: dict[int, dict[int, str]] = {}
    for p, held in missed.items():
        tokens = {v: c.token(p) for v, c in usable.items()}
        if prev.base is None:
            tokens[-1] = ""  # every change since the first batch is a retained delta
        if not final and tokens.get(StoreToken.version_of(held)) == held:
            feeds[p], catch_up[p] = Feed.CATCH_UP, tokens
        else:
            feeds[p] = Feed.FULL
    # the deltas after the oldest version a caught-up store holds are read; a task that finds its
    # store older than that (it ran on another host) is not caught up from them but fed in full
    since = min((StoreToken.version_of(missed[p]) for p in catch_up), default=-1)
    catch_up = {p: {v: t for v, t in tokens.items() if v >= since} for p, tokens in catch_up.items()}
    return FeedPlan(feeds, catch_up, since)


def _same_shape(a: Any, b: Any) -> bool:
    """Do two commits' snapshot schemas hold the same state columns (names, types, order)?"""
    if a == b:
        return True
    if b is None:
        return False
    shape = [(f.name, f.dataType.simpleString()) for f in T.StructType.fromJson(dict(a)).fields]
    return shape == [(f.name, f.dataType.simpleString()) for f in T.StructType.fromJson(dict(b)).fields]
