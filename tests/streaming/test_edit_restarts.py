"""The restart around a queued edit (streaming/edit_restarts.py) where the query is never idle:
a stop that lands inside a batch (an offset logged, no commit) applies nothing and starts the
query again with the request still queued; after BUSY_TRIES such stops the request is answered
with an error naming the trigger. The query here is a stand-in (no Spark job), its checkpoint
a directory with the offset and commit logs a batch cut short leaves."""

from __future__ import annotations

import pytest

from spark_keyed_sql.state.edit_queue import EditQueue, EditRequest
from spark_keyed_sql.streaming import edit_restarts
from spark_keyed_sql.streaming.edit_restarts import EditRestarts


class _Query:
    """Always inside a trigger; stops and starts as asked."""

    def __init__(self, jsq: object):
        self._jsq = jsq
        self.stops = 0
        self.isActive = True
        self.status = {"isTriggerActive": True}

    def awaitTermination(self, timeout=None):
        return None

    def stop(self):
        self.stops += 1

    def processAllAvailable(self):
        return None

    def exception(self):
        return None


class _Run:
    def __init__(self, jsq: object):
        self.query = _Query(jsq)


class _Idle(EditRestarts):
    LOOK_S = 3600.0  # (the watcher thread stays asleep: the test drives the restarts)
    QUIET_S = 0.05


def test_a_query_never_idle_keeps_running_and_the_edit_is_refused_after_the_tries(spark, tmp_path, monkeypatch):
    cp = tmp_path / "cp"
    for d, names in (("offsets", ["0", "1"]), ("commits", ["0"])):
        (cp / d).mkdir(parents=True)
        for n in names:
            (cp / d / n).write_text("v1\n{}\n")
    monkeypatch.setattr(edit_restarts, "apply_queued", lambda *a, **k: pytest.fail("applied inside a batch"))
    queue = EditQueue(str(cp), spark)
    request = EditRequest.new("delete", "f", "user_id = 'u1'", ())
    queue.submit(request)
    run = _Run("jvm-query-0")
    started = []

    def relaunch():
        started.append(_Run(f"jvm-query-{len(started) + 1}"))
        return started[-1]

    restarts = _Idle(spark, run, str(cp), None, None, "tws", lambda n: None, relaunch)
    for attempt in range(1, _Idle.BUSY_TRIES + 1):
        assert queue.answer(request.id) is None  # still queued before each try
        assert restarts._restart(queue.pending()) is True  # the query goes on
        assert len(started) == attempt and run.query._jsq == f"jvm-query-{attempt}"
    answer = queue.answer(request.id)
    assert answer is not None and answer.audit is None
    assert f"stopped {_Idle.BUSY_TRIES} times" in answer.error and "processing-time trigger" in answer.error
    assert run.query.stops == _Idle.BUSY_TRIES
    assert run.query.awaitTermination() is None  # the handle's wait goes on across the restarts (no failure)


def test_the_handle_stays_active_while_the_query_restarts(spark, tmp_path, monkeypatch):
    """Between the stop and the new query's start (the edit applied, its caller answered) the
    user's handle is a query that goes on: isActive is True there, as before and after."""
    import threading

    from spark_keyed_sql.streaming.failures import translating

    def start(name: str):
        return translating(
            spark.readStream.format("rate")
            .option("rowsPerSecond", 1)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / name))
            .start()
        )

    applied, release = threading.Event(), threading.Event()

    def apply(*args, **kwargs):
        applied.set()
        return 1

    monkeypatch.setattr(edit_restarts, "apply_queued", apply)
    queue_home = tmp_path / "queue"
    queue_home.mkdir()
    handle = start("first")
    run = type("Run", (), {"query": handle})()
    started: list = []

    def relaunch():
        release.wait(60)
        started.append(type("Run", (), {"query": start("second")})())
        return started[-1]

    restarts = _Idle(spark, run, str(queue_home), None, None, "tws", lambda n: None, relaunch)
    worker = threading.Thread(target=lambda: started.append(restarts._restart([])))
    try:
        worker.start()
        assert applied.wait(60)
        assert handle.isActive is True  # its JVM query stopped, the next one not started yet
        release.set()
        worker.join(60)
        assert started[-1] is True and handle.isActive is True
        assert handle._jsq is started[0].query._jsq
    finally:
        release.set()
        handle.stop()
    assert handle.isActive is False
