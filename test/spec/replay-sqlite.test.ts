// The spec's traces replayed on the embedded store (test/spec/replay-suite.ts).
import { replaySuite } from './replay-suite.js';

replaySuite('sqlite', { traces: 1, steps: 5 });
