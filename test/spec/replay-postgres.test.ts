// The spec's traces replayed on PostgreSQL (test/spec/replay-suite.ts).
import { replaySuite } from './replay-suite.js';

replaySuite('postgres', { traces: 1, steps: 5 });
