// A migration, once in main, is never edited: a schema that applied it keeps what it made, so an
// edited file would leave that schema different from a new one for good (migrate then mends
// functions, src/store/postgres/drift.ts, but not tables). Change the schema in a new numbered file.
// A new file is added here with its hash once it is merged.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/wait.js';

const FROZEN: Array<[string, string]> = [
  ['001_init.sql', '28d96643cc418cbc5c178ff904917a04fd377478fde304db35ecf08bc0454756'],
  ['002_assert_lease.sql', 'cb7f3e6657a27fa752e2c653cd894544a45d1a63ea13087b930ccd90c2083213'],
  ['003_least_privilege.sql', 'a42f43f53e72849860c0e2de7e53d973132740f3b32cbdd7f7d585571fac5cd1'],
  ['004_finish_retry.sql', '3a5823a171303ce56844a4467ea92ba505dd4f0260a2d1bd065857066c0a4084'],
  ['005_status_indexes.sql', '4c76fd0a1530df6fa0ba6972b19c4f113a24dee0ccace339ad9959aec6d00af7'],
  ['006_session_lookup.sql', '3221849b3f16a543ae1404eaadc06b33e055c5dd1ecb081cd18ffc90aa9cba0c'],
  ['007_lost_once.sql', '8bd2cd5a32bfa2984762f11ab46b7327419f1a23c6c84e2919e5ac7888503bd0'],
  ['008_finish_after_takeover.sql', 'afafea9e00e063edb37fba6d3f6bcbf2c5993a1706c1755205abb2118727b873'],
  ['009_renew_after_release.sql', 'ebe84923b05ef41a331a15778b6128c18765a2c3fe79578e1371e82e99091708'],
  ['010_alert_lookback.sql', '5c589f606dc8140bf8c13949e4582622884ffd399ed7a2b91c76c721bc9806cc'],
  ['011_failover_fencing.sql', '053751204d6f93744989ab93e1c578a7209cd4044514a8edd2a473ef087de466'],
  ['012_versions_pause_mark.sql', '5b3f804d076289793bcef83f33c6af8c327647e8d66e240808c90c05d8bf419d'],
  ['013_catch_up.sql', '85df6d653dea7c980a7f0afe395985734f7553ad0040d5f5c6daf8d6c6ac6323'],
  ['014_retention.sql', '45c68bf95e236f69bad2c02707b9c35862de1691d830b434a3a95e239e1852f1'],
  ['015_output_tail.sql', 'b35ef0de5ec63af0cd1db88e60d73a8792c7f765c4803193a037b7595e6dee1d'],
  ['017_failover_fencing_after_merge.sql', 'd01ce269d8ff4698159d52fb9e849269df1c1b3d0f93ec3c71e9162d0e40d90c'],
  ['018_alert_lookback_registry.sql', '2b106950b9f9f87eb44612aab0d072c7a5d8c3e6307c1a9f69a7cc0143f40cad'],
  ['019_window_digest.sql', '185a308f1a61e737e286b306c699d3878d7972b6eec195bc87cbab40a9831da4'],
  ['020_one_window_gate.sql', '012a9464abde71b19c53d417799e5af77e462e54eab1c9e4ada9d2348fde36af'],
  ['021_durable_tokens_after_lost_history.sql', '362d6c44d6c5e3bc7dbd73ed208e1a43907eb17be8161c567b04d469b8cbb4f8'],
  ['023_expect_duration_marks_ahead.sql', '3074ee1faf110cf7ba1cdf940e41808be06951f36117049110fa721e6fcfc5d0'],
  ['024_attempt_budget.sql', '81140e6a8f30c3572ab906b0d506c60a50a587d9d660cb247cc12f5f2035f708'],
  ['025_on_busy_replace.sql', '8875f563f0302e66106985cee63c3928062bcaa2b05ddeb75b4729f25eb9beac'],
  ['026_claimed_as.sql', 'f9ac1a0c7c75e827899fe2a3d96cafd3320fe0ed2209a7aa2643acdc6defed1d'],
  ['027_attempts_every_path.sql', 'fbf8e978c17d04d9364ccf4a765c18dd51ff667dba0f74669d150357d79ba48c'],
  ['028_schedule_change_effective.sql', '9ba853592a469ab9e67d29d112c63ab6326432c78c650c87a82803464bd05739'],
  ['031_default_attempt_budget.sql', '86e735fa45ad9495898ac446d0cd44cc49f6f41d55edff7899eb90edbf8119a8'],
  ['033_default_budget_counts_failed.sql', '66d10961ed94bedccae7a322d1af7a7ac21549263d9c2a1c27595432e9b83992'],
  ['035_two_clock_takeover.sql', 'd52d280ce53aac45ba2e92fa55625588204c77e35c02bd2ad28448f77203ed49'],
  ['038_backfill_expected_from.sql', '3cbf6a82c32c7e582ca920dba54bdbcafaa8bac3f4fbe4b7b9ebc9f7c2619e5e'],
];

const sqlDir = path.join(ROOT, 'sql');
const sha256 = (file: string): string =>
  createHash('sha256')
    .update(readFileSync(path.join(sqlDir, file), 'utf8').replace(/\r\n/g, '\n'))
    .digest('hex');

describe('released migrations', () => {
  it.each(FROZEN)('%s is unchanged', (file, hash) => {
    expect(sha256(file), `${file} was edited; put the change in a new migration instead`).toBe(hash);
  });

  it('none was removed or renumbered, and every other file is newer than the frozen ones', () => {
    const files = readdirSync(sqlDir)
      .filter((f) => f.endsWith('.sql'))
      .sort();
    expect(files.slice(0, FROZEN.length)).toEqual(FROZEN.map(([f]) => f));
  });
});
