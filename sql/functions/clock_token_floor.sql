-- clock_token_floor(): the database clock as a token's count (021): milliseconds since
-- 2025-01-01 UTC, below 10^12 (the count's room in a token) until 2056. fence_epoch() raises
-- the token floor to it once per server start.
CREATE OR REPLACE FUNCTION clock_token_floor() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT floor(extract(epoch FROM now()) * 1000)::bigint - 1735689600000
$$;
