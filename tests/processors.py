"""KeyedProcessor classes used by the tests."""

from spark_keyed_sql import KeyedProcessor, ListState, MapState, ValueState


class Spend(KeyedProcessor):
    """Uses all three typed state kinds."""

    total = ValueState("double", default=0.0, ttl="7 days")
    recent = ListState("amount double, ts timestamp")
    by_merchant = MapState("string", "double")
    returns = "total double, n_recent long, top_merchant string, top_amount double"

    def process(self, key, rows):
        rows = rows.sort_values("ts")
        self.total.update(self.total.get() + float(rows["amount"].sum()))
        for r in rows.itertuples():
            self.recent.append({"amount": r.amount, "ts": r.ts.to_pydatetime()})
            self.by_merchant.put(r.merchant, (self.by_merchant.get(r.merchant) or 0.0) + r.amount)
        recent = list(self.recent.get())[-3:]
        self.recent.put(recent)
        top = max(self.by_merchant.items(), key=lambda kv: (kv[1], kv[0]))
        yield {"total": self.total.get(), "n_recent": len(recent), "top_merchant": top[0], "top_amount": top[1]}


class LatestTransaction(KeyedProcessor):
    """The Flink guide's latest transaction per customer: a struct ValueState."""

    latest = ValueState("amount double, ts timestamp, merchant string")
    seen = ValueState("bigint", default=0)
    returns = "latest_amount double, latest_merchant string, seen bigint"

    def process(self, key, rows):
        last = rows.sort_values("ts").iloc[-1]
        cur = self.latest.get()
        if cur is None or last.ts.to_pydatetime() >= cur["ts"]:
            self.latest.update({"amount": float(last.amount), "ts": last.ts.to_pydatetime(), "merchant": last.merchant})
        self.seen.update(self.seen.get() + len(rows))
        cur = self.latest.get()
        return (cur["amount"], cur["merchant"], self.seen.get())
