-- fence_epoch(): the epoch tokens are issued in, advanced first when the server's history
-- (timeline, system identifier) is not the one it was last read on: a promotion, a
-- point-in-time restore, a restore into a new cluster. See sql/011_failover_fencing.sql.
-- 021: and, in the same history, the token floor raised when the server has started since (a
-- new postmaster): a crash that lost unflushed WAL, or a physical backup or disk snapshot
-- started in place, keeps the timeline and system identifier but may have forgotten tokens
-- already issued. The floor is the database clock in milliseconds since 2025 (a hybrid logical
-- clock, taken once per start): every token issued after the start is above it, so above every
-- token issued before (those were below the clock of their own time), as long as this server's
-- clock is not behind the clock the lost tokens were issued by. A row from before 021 (no
-- start recorded) records its start without a floor.
CREATE OR REPLACE FUNCTION fence_epoch() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_row fence_epoch%ROWTYPE;
  v_tl bigint := server_timeline();
  v_sys text := server_system_id();
  v_step bigint;
  v_start timestamptz := pg_postmaster_start_time(); -- 021
BEGIN
  LOOP
    SELECT * INTO v_row FROM fence_epoch f;
    IF NOT FOUND THEN
      INSERT INTO fence_epoch (epoch, timeline, system_id, started_at) VALUES (greatest(coalesce(v_tl, 1) - 1, 0), v_tl, v_sys, v_start)
      ON CONFLICT (id) DO NOTHING;
      CONTINUE;
    END IF;
    -- 0: the same history, or nothing to compare with (a hidden timeline hides any failover).
    v_step := fence_epoch_step(v_row.timeline, v_row.system_id, v_tl, v_sys);
    IF v_step = 0 AND v_row.started_at IS NOT DISTINCT FROM v_start THEN RETURN v_row.epoch; END IF;
    IF v_step = 0 THEN
      UPDATE fence_epoch f SET started_at = v_start,
             token_floor = CASE WHEN v_row.started_at IS NULL THEN f.token_floor ELSE greatest(f.token_floor, clock_token_floor()) END
       WHERE f.epoch = v_row.epoch AND f.started_at IS NOT DISTINCT FROM v_row.started_at;
      IF FOUND THEN RETURN v_row.epoch; END IF;
      CONTINUE;
    END IF;
    IF v_row.epoch + v_step > 9223371 THEN
      RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
        MESSAGE = format('leasejob: fence epoch %s cannot advance by %s: tokens would not fit a bigint', v_row.epoch, v_step);
    END IF;
    UPDATE fence_epoch f SET epoch = v_row.epoch + v_step, timeline = v_tl, system_id = coalesce(v_sys, f.system_id),
           changed_at = now(), started_at = v_start, token_floor = 0, prev_epoch = v_row.epoch, prev_timeline = v_row.timeline, prev_system_id = v_row.system_id
     WHERE f.epoch = v_row.epoch;
    IF FOUND THEN RETURN v_row.epoch + v_step; END IF;
  END LOOP;
END $$;
