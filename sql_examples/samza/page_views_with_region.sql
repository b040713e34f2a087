-- Samza: table-stream join, page views enriched with the member's region at the time.
-- udf: with_region = samza_functions:EnrichWithRegion
CREATE OR REPLACE TEMPORARY VIEW page_views
USING csv OPTIONS (path '${here}/../data/page_views.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW profiles
USING csv OPTIONS (path '${here}/../data/profiles.csv', header 'true', inferSchema 'true');

SELECT member_id, ts, e.page, e.region
FROM (
  SELECT member_id, 'profile' AS kind, region AS value, ts, 0 AS side FROM profiles
  UNION ALL
  SELECT member_id, 'view' AS kind, page AS value, ts, 1 AS side FROM page_views
) s
GROUP BY KEY member_id
WITH STATE with_region(kind, value) AS e ORDER BY ts, side
ORDER BY member_id, ts, page
