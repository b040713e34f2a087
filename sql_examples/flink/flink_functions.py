"""The Flink keyed-state guide's examples as registered KeyedProcessors."""

from spark_keyed_sql import KeyedProcessor, ListState, MapState, StatefulFunction, ValueState


class LatestTransaction(KeyedProcessor):
    """The latest transaction per customer (a struct ValueState) and how many were seen."""

    latest = ValueState("amount double, ts timestamp, merchant string")
    seen = ValueState("bigint", default=0)
    returns = "amount double, merchant string, ts timestamp, seen bigint"

    def process(self, key, rows):
        last = rows.sort_values("ts").iloc[-1]
        cur = self.latest.get()
        if cur is None or last.ts.to_pydatetime() >= cur["ts"]:
            self.latest.update({"amount": float(last.amount), "ts": last.ts.to_pydatetime(), "merchant": last.merchant})
        self.seen.update(self.seen.get() + len(rows))
        latest = self.latest.get()
        return [(latest["amount"], latest["merchant"], latest["ts"], self.seen.get())]


class EnrichTransactions(KeyedProcessor):
    """Enrichment join of two inputs, ``transactions`` and ``customers`` (a frame each), that
    waits for missing data: transactions wait in a ListState until the customer's details
    (ValueState) arrive; a MapState keeps spend per merchant."""

    customer = ValueState("name string, tier string")
    pending = ListState("tx_id string, amount double, merchant string")
    spend = MapState("string", "double")
    returns = "tx_id string, amount double, merchant string, name string, tier string, merchant_spend double"

    def process(self, key, transactions, customers):
        out = []
        rows = [(r.ts, 0, r) for r in customers.itertuples()] + [(r.ts, 1, r) for r in transactions.itertuples()]
        for _, kind, r in sorted(rows, key=lambda x: (x[0], x[1])):  # by time; a customer before a tx at one time
            if kind == 0:
                self.customer.update({"name": r.name, "tier": r.tier})
                waiting = list(self.pending.get())
                self.pending.clear()
                for tx in waiting:
                    out.append(self._enrich(tx))
            elif self.customer.exists():
                out.append(self._enrich({"tx_id": r.tx_id, "amount": r.amount, "merchant": r.merchant}))
            else:
                self.pending.append({"tx_id": r.tx_id, "amount": float(r.amount), "merchant": r.merchant})
        return out

    def _enrich(self, tx):
        total = round((self.spend.get(tx["merchant"]) or 0.0) + tx["amount"], 2)
        self.spend.put(tx["merchant"], total)
        c = self.customer.get()
        return (tx["tx_id"], float(tx["amount"]), tx["merchant"], c["name"], c["tier"], total)


class SpendInEur(StatefulFunction):
    """Each payment in EUR at the rate as of the payment: the rates are a broadcast input
    versioned by event time (Kafka Streams' versioned table lookups), so a rate that changes
    during the day converts only the payments after it; a currency without a rate then (not
    given yet, or withdrawn by an empty rate) leaves the payment out."""

    returns = "payment_id string, ts timestamp, eur double, total_eur double"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total_eur = 0.0

    def execute(self, payment):
        rate = self.ctx.broadcast("rates").get(payment["currency"])
        if rate is None:
            return None
        eur = round(payment["amount"] * rate, 2)
        self.total_eur = round(self.total_eur + eur, 2)
        return {"payment_id": payment["payment_id"], "ts": payment["ts"], "eur": eur, "total_eur": self.total_eur}


class FraudRules(StatefulFunction):
    """Flink's broadcast-state pattern: rules added, changed and removed at run time (kept by
    ``on_broadcast``) matched against each customer's transactions: ``amount`` rules against the
    transaction, ``total`` rules against the customer's running total (per-key state)."""

    returns = "tx_id string, ts timestamp, rule string"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def on_broadcast(self, name, row):
        rules = self.ctx.broadcast(name)
        if row["op"] == "remove":
            rules.pop(row["rule_id"], None)
        else:
            rules[row["rule_id"]] = {"kind": row["kind"], "threshold": row["threshold"]}

    def execute(self, tx):
        self.total = round(self.total + tx["amount"], 2)
        out = []
        for rule_id, rule in sorted(self.ctx.broadcast("rules").items()):
            value = tx["amount"] if rule["kind"] == "amount" else self.total
            if value > rule["threshold"]:
                out.append((tx["tx_id"], tx["ts"], rule_id))
        return out
