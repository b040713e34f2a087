"""Crash recovery by fault injection (the CI subset: kills at three named points of bulk over
``ks.run``, one of a native stream step, tws over a continuous ``ks.start`` stream on
viewfs://; the rest in the slow tier: tws's point plan, bulk's continuous stream, two streaming
inputs, the native step's other points).
`make crash` runs the full suite (20+ kills per engine, random times too) and writes its
figures to docs/reliability.md."""

import pytest
from crash.harness import run

# the bulk engine's commit protocol has a point between each of its steps; transformWithState's
# steps are inside Spark, so it is killed inside processing and at random times. The harness
# gives every other incarnation an empty local state directory (bulk then feeds the batch from
# the checkpoint: before_rebuild is planned on such an incarnation, an even index) and compacts
# every 3 batches
PLANS = {
    "bulk": [
        "processing:3",
        "local_state_written:2",
        "before_rebuild:1",
        "state_written:2",
        "compaction_written:1",
        "sink_write:2",
        "after_sink:2",
    ],
    "tws": ["processing:10", "processing:25"],
}


# inside the lease's writes (a heartbeat a second, harness.LEASE_CONF): a renewal killed before
# its move, a start killed between its lease's create and write (the next start waits at most two
# heartbeats on the empty lease, then takes it over). In the slow tier and `make crash`: CI kills
# at both points in tests/state/test_lease.py
LEASE_PLAN = ["lease_renewing:3", "lease_created:1"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(PLANS))
def test_kill_inside_the_lease_then_recover_exactly_once(engine, tmp_path):
    report = run(engine, LEASE_PLAN, files=len(LEASE_PLAN) + 3, keys=20, per_file=40, workdir=str(tmp_path))
    assert sum(report.kills.values()) == len(LEASE_PLAN), report
    assert report.lost == 0 and report.duplicated == 0 and report.wrong_state == 0, report
    assert report.rows_out == report.rows_expected


# engine bulk with native stream steps (no Python worker: the kills land in the step's own
# protocol, before and after the sink, and in a compaction); CI kills after the sink (a batch
# written out but not committed), the slow tier at every point
NATIVE_PLANS = {"ci": ["after_sink:2"], "all": ["state_written:2", "after_sink:2", "compaction_written:1"]}


@pytest.mark.parametrize("plan", ["ci", pytest.param("all", marks=pytest.mark.slow)])
def test_kill_a_native_stream_step_then_recover_exactly_once(plan, tmp_path):
    points = NATIVE_PLANS[plan]
    report = run("bulk-native", points, files=len(points) + 3, keys=20, per_file=40, workdir=str(tmp_path))
    assert sum(report.kills.values()) == len(points), report
    assert report.lost == 0 and report.duplicated == 0 and report.wrong_state == 0, report
    assert report.rows_out == report.rows_expected


# the continuous ks.start stream: one kill each, at the point where a half-done batch is likeliest
START_PLANS = {"bulk": ["after_sink:2"], "tws": ["processing:10"]}


def test_every_engine_has_a_crash_plan():
    from spark_keyed_sql.engines import engine_names

    assert sorted(PLANS) == sorted(START_PLANS) == engine_names()


# enough files that the last planned kill still has a batch to land in whether a micro-batch
# runs as one task (adaptive execution coalesces tiny batches) or one per shuffle partition.
# CI kills bulk at three of its points: state committed with no output yet, output half written,
# a rebuild from the checkpoint (an even index: an incarnation without local state); every point
# of bulk's plan and tws's (kills inside processing, which Spark's own operator recovers) run in
# the slow tier and `make crash`, tws in CI through the continuous scenario below (CI's budget)
CI_PLANS = {"bulk": ["state_written:2", "sink_write:2", "before_rebuild:1"]}


@pytest.mark.parametrize(
    "engine, plan",
    [("bulk", "ci")] + [pytest.param(e, "all", marks=pytest.mark.slow) for e in sorted(PLANS)],
)
def test_kill_at_each_point_then_recover_exactly_once(engine, plan, tmp_path):
    points = CI_PLANS[engine] if plan == "ci" else PLANS[engine]
    report = run(engine, points, files=len(points) + 3, keys=20, per_file=40, workdir=str(tmp_path))
    assert sum(report.kills.values()) == len(points), report  # every planned kill happened
    assert report.lost == 0 and report.duplicated == 0 and report.wrong_state == 0, report
    assert report.rows_out == report.rows_expected


# CI runs tws's with input, checkpoint and sink on viewfs:// (only Spark's file system layer
# resolves those URIs); bulk's, and both on local paths, are in the slow tier and in `make crash`
@pytest.mark.parametrize(
    "engine, where",
    [
        pytest.param(e, w, marks=() if (e, w) == ("tws", "viewfs") else pytest.mark.slow)
        for e in sorted(START_PLANS)
        for w in ("viewfs", "local")
    ],
)
def test_kill_a_continuous_stream_then_recover_exactly_once(engine, where, tmp_path):
    report = run(
        engine,
        START_PLANS[engine],
        files=4,
        keys=10,
        per_file=20,
        workdir=str(tmp_path),
        mode="start",
        viewfs=where == "viewfs",
    )
    assert sum(report.kills.values()) == len(START_PLANS[engine]), report
    assert report.lost == 0 and report.duplicated == 0 and report.wrong_state == 0, report
    assert report.rows_out == report.rows_expected


# two named inputs of one function, each a streaming file source, killed in ks.run (one file of
# each input per micro-batch): nothing lost, nothing twice, one state per key over both (the
# slow tier; CI's 45-minute budget)
TWO_INPUT_PLANS = {
    "bulk": ["after_sink:1"],
    "bulk-more": ["processing:2", "state_written:2"],
    "tws": ["processing:10"],
}


@pytest.mark.slow
@pytest.mark.parametrize("plan", sorted(TWO_INPUT_PLANS))
def test_kill_with_two_streaming_inputs_then_recover_exactly_once(plan, tmp_path):
    engine, points = plan.split("-")[0], TWO_INPUT_PLANS[plan]
    report = run(engine, points, files=8, keys=10, per_file=20, workdir=str(tmp_path), inputs=2)
    assert sum(report.kills.values()) == len(points), report
    assert report.lost == 0 and report.duplicated == 0 and report.wrong_state == 0, report
    assert report.rows_out == report.rows_expected
