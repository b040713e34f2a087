"""The bulk engine's records: kinds, task stats, the step's totals. No Spark session needed."""

from spark_keyed_sql.engines.bulk.records import KIND, InputKind, OutputKind, PassCounts, TaskStats


def test_input_kinds_sort_in_the_order_a_partition_reads_them():
    # incremental_input sorts by this column: ticks, state fed back, initial state, then events
    assert sorted(InputKind, key=int) == [InputKind.TICK, InputKind.REBUILD, InputKind.INIT, InputKind.EVENT]


def test_the_delta_directory_name_is_part_of_the_checkpoint_format():
    # commit records name delta directories by it: changing a code would orphan every checkpoint
    assert OutputKind.DELTA.directory == f"{KIND}=1" == "__ks_kind=1"
    # by __members__: iterating an IntEnum skips an alias, so a duplicated code would not show
    for kinds in (OutputKind, InputKind):
        codes = [int(v) for v in kinds.__members__.values()]
        assert len(set(codes)) == len(codes), kinds


def test_task_stats_columns_come_from_its_fields_and_round_trip():
    names = [f.name for f in TaskStats.struct_fields()]
    assert names == TaskStats.COLUMNS and len(names) == 13 and names[:2] == ["__ks_st_hit", "__ks_st_token"]
    s = TaskStats(
        hit=True,
        token="3-a-17",
        late_rows=1,
        max_event_time_ms=99,
        events=5,
        keys_touched=2,
        timers_fired=0,
        inserted=1,
        deleted=0,
        changed=2,
        next_timer_ms=None,
        next_expiry_ms=1000,
        max_event_times='{"clicks": 40, "views": 99}',
    )
    row = dict(zip(TaskStats.COLUMNS, s.values()))
    assert TaskStats.from_row(row) == s and s.task == "17"
    assert s.input_max_event_times == {"clicks": 40, "views": 99}
    assert TaskStats(True, "1-x-1").input_max_event_times == {}


def test_the_step_total_sums_over_partitions_by_hand():
    a = TaskStats(
        True,
        "1-x-1",
        late_rows=1,
        max_event_time_ms=50,
        events=4,
        keys_touched=2,
        timers_fired=1,
        inserted=2,
        deleted=0,
        changed=2,
        next_timer_ms=300,
        next_expiry_ms=None,
        max_event_times='{"clicks": 50, "views": 10}',
    )
    b = TaskStats(
        True,
        "1-x-2",
        late_rows=0,
        max_event_time_ms=80,
        events=3,
        keys_touched=3,
        timers_fired=0,
        inserted=1,
        deleted=1,
        changed=3,
        next_timer_ms=200,
        next_expiry_ms=700,
        max_event_times='{"views": 80}',
    )
    idle = TaskStats(True, "1-x-3")  # a partition without input: every count None
    t = TaskStats.total([a, b, idle])
    figures = (t.late_rows, t.events, t.keys_touched, t.timers_fired, t.inserted, t.deleted, t.changed)
    assert figures == (1, 7, 5, 1, 3, 1, 5)
    assert (t.max_event_time_ms, t.next_timer_ms, t.next_expiry_ms) == (80, 200, 700)
    assert t.input_max_event_times == {"clicks": 50, "views": 80}  # each input's newest over partitions
    assert TaskStats.total([idle]).max_event_time_ms is None and TaskStats.total([idle]).input_max_event_times == {}


def test_a_partitions_stats_keep_the_key_pass_names():
    counts = PassCounts(events=6, late_rows=2, keys_touched=3, timers_fired=1, max_event_time_ms=70)
    counts.max_event_times.update({"views": 70, "clicks": 20})
    s = TaskStats.counted("2-a-9", counts, inserted=1, deleted=0, changed=4, next_timer_ms=None, next_expiry_ms=5)
    assert (s.events, s.late_rows, s.keys_touched, s.timers_fired, s.max_event_time_ms) == (6, 2, 3, 1, 70)
    assert (s.hit, s.token, s.inserted, s.changed, s.next_expiry_ms) == (True, "2-a-9", 1, 4, 5)
    assert s.input_max_event_times == {"views": 70, "clicks": 20}
    # the names of the figures are the commit record's and ks.run's summary's
    from spark_keyed_sql.state.commit_record import BatchMetrics

    shared = {"events", "late_rows", "keys_touched", "timers_fired"}
    assert shared <= set(BatchMetrics.__dataclass_fields__) and shared <= set(PassCounts.__dataclass_fields__)
