-- two_clock_confirmed(): whether a second clock agrees that the holder of a lease the database
-- clock calls expired (its generation, renewal counter, TTL and recorded offset) has stopped
-- (035, docs/fencing.md "Which clock decides what"). Either:
--  * the offsets agree: the contender's offset now (clock_offset_estimate(), an upper bound)
--    exceeds the lower bound of the holder's offset at its last renewal (holder_offset_ms -
--    holder_uncertainty_ms) by no more than the holder's safety margin, min(1 s, TTL/10). The
--    database clock then cannot have stepped forward since by more than the margin, which the
--    holder's stop point keeps in hand (its child is gone by its renewal's send + TTL - margin);
--    so the database's expiry is the holder's too. A step backward, or a contender's host clock
--    ahead, only makes the expiry later: agreement is one-sided on purpose.
--  * or the contender watched: p_clock's observed_generation and observed_renewals are this
--    lease's generation and renewal counter, which the contender saw unchanged for a full TTL
--    of the holder on its own monotonic clock (it says so by sending them; the row unchanged is
--    the compare-and-set). The holder's child is gone by then, whatever any wall clock says.
-- A holder that recorded no offset (a runner before 035) is confirmed only by watching.
CREATE OR REPLACE FUNCTION two_clock_confirmed(
  p_generation bigint, p_renewals bigint, p_ttl_ms integer, p_holder_offset_ms integer,
  p_holder_uncertainty_ms integer, p_clock jsonb
) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT coalesce(
           (p_clock->>'observed_generation') = p_generation::text
             AND (p_clock->>'observed_renewals') = p_renewals::text, false)
      OR coalesce(
           clock_offset_estimate(p_clock) - (p_holder_offset_ms - coalesce(p_holder_uncertainty_ms, 0))
             <= least(1000, p_ttl_ms / 10.0), false)
$$;
