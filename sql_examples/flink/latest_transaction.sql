-- Flink: the latest transaction per customer (ValueState of a struct).
-- udf: latest_tx = flink_functions:LatestTransaction
CREATE OR REPLACE TEMPORARY VIEW transactions
USING csv OPTIONS (path '${here}/../data/transactions.csv', header 'true', inferSchema 'true');

SELECT customer_id, l.amount, l.merchant, l.ts, l.seen
FROM transactions
GROUP BY KEY customer_id
WITH STATE latest_tx(amount, merchant, ts) AS l ORDER BY ts
ORDER BY customer_id
