// A reporter that ends the run with one line: which tests skipped, and the command that installs what they need.
import path from 'node:path';
import type { Reporter, TestModule, Vitest } from 'vitest/node';
import { missingPackages } from './test-tools.js';

export default class SkipReport implements Reporter {
  private filtered = false;

  onInit(vitest: Vitest): void {
    // With -t, the tests left out by the name filter count as skipped: nothing to report then.
    this.filtered = vitest.config.testNamePattern !== undefined;
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    if (this.filtered) return;
    const perFile = new Map<string, number>();
    for (const m of modules) {
      for (const t of m.children.allTests()) {
        if (t.result().state !== 'skipped') continue;
        const file = path.relative(process.cwd(), m.moduleId);
        perFile.set(file, (perFile.get(file) ?? 0) + 1);
      }
    }
    const total = [...perFile.values()].reduce((a, b) => a + b, 0);
    if (total === 0) return;
    const files = [...perFile].map(([f, n]) => `${f} (${n})`).join(', ');
    const missing = missingPackages();
    const fix =
      missing.length > 0
        ? `to run them: apt-get install -y --no-install-recommends ${missing.join(' ')}`
        : 'no Debian tool from .ci/run is missing: each is the other branch of a condition, and its file printed why';
    process.stdout.write(`\nskipped ${total} test${total === 1 ? '' : 's'}: ${files}; ${fix}\n`);
  }
}
