"""A function with several inputs in KeyedTester: ``self.ctx.input`` names each row's input, a
KeyedProcessor gets one frame per input by name (the others empty), state is shared by the key
across inputs; unknown inputs and a processor whose parameters do not match are refused."""

import pytest

from spark_keyed_sql import KeyedProcessor, KeyedSQLError, KeyedTester, RegistrationError, StatefulFunction, ValueState


class AdClickJoin(StatefulFunction):
    """Samza's stream-stream join: a click is matched to its impression (either may come first)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.impression = None
        self.clicks = []

    def execute(self, event):
        if self.ctx.input == "impressions":
            self.impression = event["campaign"]
            out, self.clicks = [(self.ctx.get_key(), self.impression, c) for c in self.clicks], []
            return out or None
        if self.impression is None:
            self.clicks.append(event["pos"])
            return None
        return [(self.ctx.get_key(), self.impression, event["pos"])]


class ProfileSettings(KeyedProcessor):
    returns = "profiles bigint, settings bigint, total bigint"
    seen = ValueState("bigint", default=0)

    def process(self, key, profiles, settings):
        self.seen.update(self.seen.get() + len(profiles) + len(settings))
        yield (len(profiles), len(settings), self.seen.get())


def test_ctx_input_names_each_rows_input_and_state_is_shared():
    t = KeyedTester(AdClickJoin, returns="imp string, campaign string, pos bigint")
    assert t.run([{"pos": 1}], key="i1", input="clicks") == []  # a click before its impression waits
    assert t.run([{"campaign": "c9"}], key="i1", input="impressions") == [{"imp": "i1", "campaign": "c9", "pos": 1}]
    assert t.run([{"pos": 2}], key="i1", input="clicks") == [{"imp": "i1", "campaign": "c9", "pos": 2}]
    assert t.state("i1")["impression"] == "c9"


def test_a_processor_gets_one_frame_per_input_the_other_empty():
    t = KeyedTester(ProfileSettings)
    assert t.inputs == ["profiles", "settings"]
    assert t.run([{"a": 1}, {"a": 2}], key="m", input="profiles") == [{"profiles": 2, "settings": 0, "total": 2}]
    assert t.run([{"b": 1}], key="m", input="settings") == [{"profiles": 0, "settings": 1, "total": 3}]


def test_an_unknown_input_is_refused_naming_the_inputs():
    with pytest.raises(KeyedSQLError, match=r"unknown input 'prefs'; its inputs are profiles, settings"):
        KeyedTester(ProfileSettings).run([{"a": 1}], key="m", input="prefs")
    with pytest.raises(KeyedSQLError, match=r"unknown input 'views'; its inputs are impressions, clicks"):
        KeyedTester(AdClickJoin, returns="a string", inputs=["impressions", "clicks"]).run([{}], key="i", input="views")


def test_a_processor_with_several_inputs_needs_run_to_say_which():
    with pytest.raises(KeyedSQLError, match=r"has the inputs profiles, settings; say which one"):
        KeyedTester(ProfileSettings).run([{"a": 1}], key="m")


def test_process_parameters_must_match_the_input_names():
    from spark_keyed_sql.runtime.runner import KeyedRunner
    from spark_keyed_sql.runtime.spec import FunctionSpec

    spec = FunctionSpec.build("ps", ProfileSettings, None, {})
    with pytest.raises(
        RegistrationError, match=r"process\(self, key, profiles, settings\) does not take the inputs users, settings"
    ):
        KeyedRunner(spec, [], True, ["users", "settings"])


class FrameColumns(KeyedProcessor):
    returns = "cols string"

    def process(self, key, profiles, settings):
        yield {"cols": ",".join(profiles.columns) + "|" + ",".join(settings.columns)}


def test_an_input_without_rows_this_batch_keeps_its_columns():
    """As on Spark, where each input's frame has the input's columns whether or not the key has
    rows of it: the columns its rows had in an earlier batch."""
    t = KeyedTester(FrameColumns)
    assert t.run([{"theme": "dark", "size": 2}], key="k", input="settings") == [{"cols": "|theme,size"}]
    assert t.run([{"name": "b"}], key="k", input="profiles") == [{"cols": "name|theme,size"}]


class Arrivals(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = []

    def execute(self, e):
        self.seen.append(f"{self.ctx.input}:{e['ts']}")
        return None


def test_one_batch_of_several_inputs_is_merged_in_order_by_order_ties_by_input_order():
    t = KeyedTester(Arrivals, inputs=["impressions", "clicks"], order_by="ts")
    batch = {"clicks": [{"ts": 3}, {"ts": 1}], "impressions": [{"ts": 1}, {"ts": 2}]}
    assert t.run(batch, key="i") == []
    # oracle: sort by ts, a tie goes to the input named first in inputs=, then as given
    rank = {"impressions": 0, "clicks": 1}
    tagged = [(r["ts"], rank[name], n, name) for name, rows in batch.items() for n, r in enumerate(rows)]
    assert t.state("i")["seen"] == [f"{name}:{ts}" for ts, _, _, name in sorted(tagged)]
    p = KeyedTester(ProfileSettings)
    assert p.run({"profiles": [{"a": 1}], "settings": [{"b": 1}, {"b": 2}]}, key="m") == [
        {"profiles": 1, "settings": 2, "total": 3}
    ]
    with pytest.raises(KeyedSQLError, match=r"unknown input 'prefs'; its inputs are profiles, settings"):
        p.run({"prefs": [{"a": 1}]}, key="m")


def test_rows_may_be_pyspark_rows():
    Row = pytest.importorskip("pyspark.sql").Row
    t = KeyedTester(AdClickJoin, returns="imp string, campaign string, pos bigint")
    t.run([Row(campaign="c1")], key="i", input="impressions")
    assert t.run([Row(pos=4)], key="i", input="clicks") == [{"imp": "i", "campaign": "c1", "pos": 4}]


def test_one_row_given_as_a_dict_is_refused_saying_rows_are_a_list():
    with pytest.raises(KeyedSQLError, match=r"rows are a list of dicts \(\[\{...\}, ...\]\); a dict is"):
        KeyedTester(Arrivals, order_by="ts").run({"ts": 1}, key="i")
