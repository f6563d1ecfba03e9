-- token_current(token): whether a token was issued in the server's current history. A lease
-- does not outlive a failover or a restore: renew, finish and assert_lease refuse older ones.
CREATE OR REPLACE FUNCTION token_current(p_token bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_row fence_epoch%ROWTYPE;
BEGIN
  SELECT * INTO v_row FROM fence_epoch f;
  IF NOT FOUND THEN RETURN true; END IF;
  RETURN CASE WHEN p_token < 1000000000000 THEN v_row.base_epoch ELSE p_token / 1000000000000 END
         >= v_row.epoch + fence_epoch_step(v_row.timeline, v_row.system_id, server_timeline(), server_system_id());
END $$;
