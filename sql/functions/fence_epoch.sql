-- fence_epoch(): the epoch tokens are issued in, advanced first when the server's history
-- (timeline, system identifier) is not the one it was last read on: a promotion, a
-- point-in-time restore, a restore into a new cluster. See sql/011_failover_fencing.sql.
CREATE OR REPLACE FUNCTION fence_epoch() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_row fence_epoch%ROWTYPE;
  v_tl bigint := server_timeline();
  v_sys text := server_system_id();
  v_step bigint;
BEGIN
  LOOP
    SELECT * INTO v_row FROM fence_epoch f;
    IF NOT FOUND THEN
      INSERT INTO fence_epoch (epoch, timeline, system_id) VALUES (greatest(coalesce(v_tl, 1) - 1, 0), v_tl, v_sys)
      ON CONFLICT (id) DO NOTHING;
      CONTINUE;
    END IF;
    -- 0: the same history, or nothing to compare with (a hidden timeline hides any failover).
    v_step := fence_epoch_step(v_row.timeline, v_row.system_id, v_tl, v_sys);
    IF v_step = 0 THEN RETURN v_row.epoch; END IF;
    IF v_row.epoch + v_step > 9223371 THEN
      RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
        MESSAGE = format('leasejob: fence epoch %s cannot advance by %s: tokens would not fit a bigint', v_row.epoch, v_step);
    END IF;
    UPDATE fence_epoch f SET epoch = v_row.epoch + v_step, timeline = v_tl, system_id = coalesce(v_sys, f.system_id),
           changed_at = now(), prev_epoch = v_row.epoch, prev_timeline = v_row.timeline, prev_system_id = v_row.system_id
     WHERE f.epoch = v_row.epoch;
    IF FOUND THEN RETURN v_row.epoch + v_step; END IF;
  END LOOP;
END $$;
