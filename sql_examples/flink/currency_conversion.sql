-- Currency conversion with rates changing during the stream: the rates are a broadcast input
-- (one table every key reads, not partitioned by the key), versioned by event time, so each
-- payment converts at the rate as of its own time (Kafka Streams' KIP-914 lookups, without
-- their nondeterminism: a rerun or another partitioning gives the same rows).
-- udf: spend_eur = flink_functions:SpendInEur
CREATE OR REPLACE TEMPORARY VIEW payments
USING csv OPTIONS (path '${here}/../data/payments.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW fx_rates
USING csv OPTIONS (path '${here}/../data/fx_rates.csv', header 'true', inferSchema 'true');

SELECT customer_id, payment_id, ts, eur, total_eur
FROM spend_eur(payments => TABLE(payments), rates => TABLE(fx_rates),
               key => 'customer_id', order_by => 'ts', event_time => 'ts', watermark => '1 hour',
               broadcast => 'rates', broadcast_key => 'currency')
ORDER BY customer_id, ts, payment_id
