-- Flink's broadcast-state pattern: fraud rules added, changed and removed at run time (a
-- broadcast input kept by the class's on_broadcast hook), matched against each customer's
-- transactions as the rules stood at the transaction's time.
-- udf: fraud_rules = flink_functions:FraudRules
CREATE OR REPLACE TEMPORARY VIEW transactions
USING csv OPTIONS (path '${here}/../data/transactions.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW rules
USING csv OPTIONS (path '${here}/../data/fraud_rules.csv', header 'true', inferSchema 'true');

SELECT customer_id, tx_id, ts, rule
FROM fraud_rules(transactions => TABLE(transactions), rules => TABLE(rules),
                 key => 'customer_id', order_by => 'ts', event_time => 'ts', watermark => '1 hour',
                 broadcast => 'rules', broadcast_key => 'rule_id')
ORDER BY customer_id, ts, tx_id, rule
