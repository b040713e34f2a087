-- Flink: enrich transactions with customer details that may arrive later
-- (ValueState for the customer, ListState for waiting transactions, MapState for spend).
-- udf: enrich = flink_functions:EnrichTransactions
CREATE OR REPLACE TEMPORARY VIEW transactions
USING csv OPTIONS (path '${here}/../data/transactions.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW customers
USING csv OPTIONS (path '${here}/../data/customers.csv', header 'true', inferSchema 'true');

SELECT customer_id, e.*
FROM (
  SELECT customer_id, 'tx' AS kind, tx_id, amount, merchant, CAST(NULL AS STRING) AS name,
         CAST(NULL AS STRING) AS tier, ts FROM transactions
  UNION ALL
  SELECT customer_id, 'customer' AS kind, NULL, NULL, NULL, name, tier, ts FROM customers
) x
GROUP BY KEY customer_id
WITH STATE enrich(kind, tx_id, amount, merchant, name, tier, ts) AS e ORDER BY ts
ORDER BY customer_id, tx_id
