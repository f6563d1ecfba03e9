-- fence_status(): what `check` and the exporter report about the history tokens are issued in.
CREATE OR REPLACE FUNCTION fence_status() RETURNS TABLE (
  epoch bigint, timeline bigint, server_timeline bigint, system_id text, server_system_id text,
  changed_at timestamptz, prev_epoch bigint, prev_timeline bigint
)
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT f.epoch, f.timeline, server_timeline(), f.system_id, server_system_id(), f.changed_at, f.prev_epoch, f.prev_timeline
    FROM fence_epoch f
$$;
