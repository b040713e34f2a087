-- Samza: stream-stream join of ad clicks with impressions; unmatched impressions expire
-- after 10 minutes (event-time timer). In a batch query, timers still due fire at the end.
-- udf: ad_clicks = samza_functions:AdClickJoin
CREATE OR REPLACE TEMPORARY VIEW impressions
USING csv OPTIONS (path '${here}/../data/ad_impressions.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW clicks
USING csv OPTIONS (path '${here}/../data/ad_clicks.csv', header 'true', inferSchema 'true');

SELECT impression_id, j.ad, j.outcome, j.delay_seconds
FROM (
  SELECT impression_id, 'impression' AS kind, ad, ts FROM impressions
  UNION ALL
  SELECT impression_id, 'click' AS kind, CAST(NULL AS STRING) AS ad, ts FROM clicks
) e
GROUP BY KEY impression_id
WITH STATE ad_clicks(kind, ad, ts) AS j ORDER BY ts
ORDER BY impression_id
