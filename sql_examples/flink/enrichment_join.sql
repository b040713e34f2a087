-- Flink: enrich transactions with customer details that may arrive later
-- (ValueState for the customer, ListState for waiting transactions, MapState for spend).
-- Two inputs into one KeyedProcessor: process(key, transactions, customers), a frame each.
-- udf: enrich = flink_functions:EnrichTransactions
CREATE OR REPLACE TEMPORARY VIEW transactions
USING csv OPTIONS (path '${here}/../data/transactions.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW customers
USING csv OPTIONS (path '${here}/../data/customers.csv', header 'true', inferSchema 'true');

SELECT *
FROM enrich(transactions => TABLE(transactions), customers => TABLE(customers), key => 'customer_id')
ORDER BY customer_id, tx_id
