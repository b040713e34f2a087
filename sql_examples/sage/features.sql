-- SAGE: online features per category (mean, count, min, max); the last row per key is current.
-- udf: features = sage_functions:FeatureComputer
CREATE OR REPLACE TEMPORARY VIEW events
USING csv OPTIONS (path '${here}/../data/events.csv', header 'true', inferSchema 'true');

SELECT category, f.mean, f.count, f.min, f.max
FROM events
GROUP BY KEY category
WITH STATE features(value) AS f ORDER BY ts
HAVING f.count = 20
ORDER BY category
