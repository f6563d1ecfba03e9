// The occurrence model against the embedded store (test/model/README.md).
import { modelSuite } from './suite.js';

modelSuite('sqlite', { runs: 4, maxCommands: 8 });
