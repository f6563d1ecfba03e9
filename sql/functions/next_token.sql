-- next_token(prev, epoch): the token after `prev` (NULL: the job's first) in `epoch`. A token is
-- epoch * 10^12 + n; n goes on counting, a token of an earlier epoch moves up into this one.
CREATE OR REPLACE FUNCTION next_token(prev bigint, epoch bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT CASE WHEN prev IS NULL THEN epoch * 1000000000000 + 1
              WHEN prev / 1000000000000 < epoch THEN epoch * 1000000000000 + prev % 1000000000000 + 1
              ELSE prev + 1 END
$$;
