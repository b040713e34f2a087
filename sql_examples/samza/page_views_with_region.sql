-- Samza: table-stream join, page views enriched with the member's region at the time.
-- Two inputs into one function; rows at one time go in the order of the inputs (profile first).
-- udf: with_region = samza_functions:EnrichWithRegion
CREATE OR REPLACE TEMPORARY VIEW page_views
USING csv OPTIONS (path '${here}/../data/page_views.csv', header 'true', inferSchema 'true');
CREATE OR REPLACE TEMPORARY VIEW profiles
USING csv OPTIONS (path '${here}/../data/profiles.csv', header 'true', inferSchema 'true');

SELECT member_id, e.ts, e.page, e.region
FROM with_region(profiles => TABLE(profiles), page_views => TABLE(page_views),
                 key => 'member_id', order_by => 'ts') AS e
ORDER BY member_id, ts, page
