-- clock_offset_estimate(): a caller's clock offset as this statement sees it (035): the database
-- clock (now(), the transaction's start) minus the host wall time the caller read just before
-- sending (p_clock's host_ms), in ms. The statement reached the server after that reading, so
-- the true offset is at most this (high by the one-way delay, never low): what the two-clock
-- rule needs of a contender's offset. NULL without p_clock (an older caller). Clamped to the
-- integer range: a host clock years off gives a large offset, not an error.
CREATE OR REPLACE FUNCTION clock_offset_estimate(p_clock jsonb) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT greatest(-2000000000, least(2000000000,
           round(extract(epoch FROM now()) * 1000 - (p_clock->>'host_ms')::numeric)))::integer
   WHERE p_clock ? 'host_ms'
$$;
