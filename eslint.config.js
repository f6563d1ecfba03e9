// Lint: ESLint's and typescript-eslint's recommended rules; the rooms of src/ as import
// boundaries (a file imports only from its own room or a lower one; a command never imports
// another); no import circle in src/; and in src/ functions of at most 120 lines and lines of at
// most 140 characters. Formatting is Prettier's.
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import js from '@eslint/js';
import globals from 'globals';
import stylistic from '@stylistic/eslint-plugin';
import tseslint from 'typescript-eslint';
import noImportCycle from './scripts/no-import-cycle.mjs';

/**
 * The rooms of src/, lowest first, each with the rooms it may import besides its own. A room is
 * a folder (with the subfolders `folders` lists for it) or one file; `base` is the files
 * directly in src/.
 * src/index.ts, the public API, may import any room, and no room imports it.
 */
const ROOMS = {
  base: [],
  // The code-cache loader runs before the CLI bundle loads: it imports nothing else of ours.
  'src/startup': [],
  'src/schedule': ['base'],
  'src/store/contract.ts': ['base'],
  'src/store/postgres': ['base', 'src/schedule', 'src/store/contract.ts'],
  'src/store/sqlite': ['base', 'src/schedule', 'src/store/contract.ts'],
  'src/store/retention.ts': ['base', 'src/schedule', 'src/store/contract.ts'],
  'src/store/choice.ts': ['base', 'src/schedule', 'src/store/contract.ts', 'src/store/postgres', 'src/store/sqlite'],
  // Outside store/, a store is reached through the contract and choice.ts, never its own files.
  'src/lease': ['base', 'src/schedule', 'src/store/contract.ts', 'src/store/choice.ts'],
  'src/monitor': ['base', 'src/schedule', 'src/store/contract.ts', 'src/store/choice.ts'],
  'src/cli': [
    'base',
    'src/startup',
    'src/schedule',
    'src/store/contract.ts',
    'src/store/choice.ts',
    'src/store/retention.ts',
    'src/lease',
    'src/monitor',
  ],
};
const ALL = [...Object.keys(ROOMS), 'src/index.ts'];
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const isFile = (room) => room.endsWith('.ts');

/** A regular expression for relative import specifiers, written in `dir`, that reach `room`. */
function reaching(dir, room) {
  if (room === 'base') return `^${escape(path.posix.relative(dir, 'src') || '.')}/[^/]+\\.js$`;
  const rel = path.posix.relative(dir, isFile(room) ? room.replace(/\.ts$/, '') : room);
  const spec = rel.startsWith('.') ? rel : `./${rel}`;
  return isFile(room) ? `^${escape(spec)}\\.js$` : `^${escape(spec)}/`;
}

/** The folders whose files belong to `room` (one file: the folder it is in). */
const folders = {
  base: ['src'],
  'src/startup': ['src/startup'],
  'src/schedule': ['src/schedule'],
  'src/store/contract.ts': ['src/store'],
  'src/store/postgres': ['src/store/postgres'],
  'src/store/sqlite': ['src/store/sqlite'],
  'src/store/retention.ts': ['src/store'],
  'src/store/choice.ts': ['src/store'],
  'src/lease': ['src/lease'],
  'src/monitor': ['src/monitor'],
  'src/cli': ['src/cli', 'src/cli/commands'],
};

/** Imports refused inside one folder of a room. */
const WITHIN = {
  // What two commands share lives below the commands (src/cli/*.ts), not in one of them.
  'src/cli/commands': [
    {
      regex: '^\\./',
      message:
        'a command may not import another command: move what they share below the commands, into src/cli/ (eslint.config.js).',
    },
  ],
};

// A folder of src/ with code in no room would go unchecked: say so instead.
const root = fileURLToPath(new URL('.', import.meta.url));
const known = new Set(Object.values(folders).flat());
for (const d of readdirSync(path.join(root, 'src'), { recursive: true, withFileTypes: true })) {
  const dir = path
    .relative(root, d.parentPath ?? d.path)
    .split(path.sep)
    .join('/');
  if (d.isFile() && /\.ts$/.test(d.name) && !known.has(dir))
    throw new Error(`eslint.config.js: ${dir}/ is in no room; add it to ROOMS and folders`);
  // A folder whose rooms are single files (src/store) holds no other code.
  const fileRooms = Object.keys(ROOMS).filter((r) => isFile(r) && path.posix.dirname(r) === dir);
  if (d.isFile() && /\.ts$/.test(d.name) && fileRooms.length > 0 && !fileRooms.includes(`${dir}/${d.name}`)) {
    throw new Error(
      `eslint.config.js: ${dir}/${d.name} is in no room; add it to ROOMS, or move it into a room's folder`,
    );
  }
}

const boundaries = Object.entries(ROOMS).flatMap(([room, allowed]) => {
  const forbidden = ALL.filter((r) => r !== room && !allowed.includes(r));
  return folders[room].map((dir) => {
    const files = room === 'base' ? ['src/*.ts'] : isFile(room) ? [room] : [`${dir}/*.ts`];
    const rules = [
      ...forbidden.map((r) => ({
        regex: reaching(dir, r),
        message:
          `${room === 'base' ? 'src/*.ts (shared basics)' : room} may not import from ${r === 'base' ? 'src/*.ts' : r}: ` +
          'rooms import only from their own or a lower one (eslint.config.js).',
      })),
      ...(WITHIN[dir] ?? []),
    ];
    return {
      files,
      ignores: ['src/index.ts'],
      rules: {
        'no-restricted-imports': ['error', { patterns: rules }],
        // no-restricted-imports does not see import('...'): the same rules for dynamic imports.
        'no-restricted-syntax': [
          'error',
          ...rules.map((p) => ({
            selector: `ImportExpression > Literal.source[value=/${p.regex.replace(/\//g, '\\/')}/]`,
            message: p.message,
          })),
        ],
      },
    };
  });
});

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { languageOptions: { globals: { ...globals.node } } },
  {
    // CommonJS: the bin entry (bin/package.json) and the .cjs files load with require().
    files: ['**/*.cjs', 'bin/**/*.js'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // Tests read manifests, charts and JSON output as untyped data.
    files: ['test/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // A pid read from a half-written file is 0, and kill(0) takes the whole test run's process
    // group with it: tests signal only through test/helpers/signal.mjs, which refuses pid <= 1
    // and the run's own process and group.
    files: ['test/**'],
    ignores: ['test/helpers/signal.mjs'],
    rules: {
      'no-restricted-properties': [
        'error',
        {
          object: 'process',
          property: 'kill',
          message: 'signal through signalPid/signalGroup (test/helpers/signal.mjs), and read pids with readPidFile.',
        },
      ],
    },
  },
  {
    // Names left unused, a value assigned and never read, an error rethrown without its cause.
    // Leaving fields out of a copy with a rest pattern (`const { raw, ...json } = s`) is not an
    // unused name.
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { ignoreRestSiblings: true }],
      'no-useless-assignment': 'error',
      'preserve-caught-error': 'error',
    },
  },
  ...boundaries,
  {
    // A function a reader sees on one screen, a line without scrolling; no import circle (a
    // reader following the imports comes back where they started). Prettier wraps code; long
    // messages and comments are wrapped by hand.
    files: ['src/**/*.ts'],
    plugins: { '@stylistic': stylistic, leasejob: { rules: { 'no-import-cycle': noImportCycle } } },
    rules: {
      'max-lines-per-function': ['error', { max: 120 }],
      '@stylistic/max-len': ['error', { code: 140 }],
      'leasejob/no-import-cycle': 'error',
    },
  },
);
