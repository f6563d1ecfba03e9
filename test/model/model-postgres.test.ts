// The occurrence model against PostgreSQL (test/model/README.md).
import { modelSuite } from './suite.js';

modelSuite('postgres', { runs: 4, maxCommands: 8 });
