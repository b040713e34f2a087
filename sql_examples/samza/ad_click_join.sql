-- Samza: stream-stream join of ad clicks with impressions; unmatched impressions expire
-- after 10 minutes (event-time timer). In a batch query, timers still due fire at the end.
-- Two inputs into one function, one state per impression id.
-- udf: ad_clicks = samza_functions:AdClickJoin
CREATE OR REPLACE TEMPORARY VIEW impressions
USING csv OPTIONS (path '${here}/../data/ad_impressions.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW clicks
USING csv OPTIONS (path '${here}/../data/ad_clicks.csv', header 'true', inferSchema 'true');

SELECT impression_id, j.ad, j.outcome, j.delay_seconds
FROM ad_clicks(impressions => TABLE(impressions), clicks => TABLE(clicks),
               key => 'impression_id', order_by => 'ts') AS j
ORDER BY impression_id
