// The CLI bundled into a temp dir (rolldown, which vite brings along; esbuild if that is what
// is installed), to measure what bundling would save at start. Built once per bench run.
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { NODE, ROOT, timed } from './proc.mjs';

/** Bundle the CLI (rolldown from vite's dependencies; esbuild if that is what is installed) into tmp. */
export async function buildBundles(ctx) {
  if (ctx.bundles) return ctx.bundles;
  ctx.bundles = await build(ctx);
  return ctx.bundles;
}

async function build(ctx) {
  const ok = [];
  const notes = [];
  let bundler;
  try {
    const { build } = await import('rolldown');
    bundler = { name: 'rolldown', build };
  } catch {
    try {
      const esbuild = await import('esbuild');
      bundler = { name: 'esbuild', esbuild };
    } catch {
      notes.push('bundling not measured: neither rolldown nor esbuild is installed');
      return { ok, notes };
    }
  }
  const variants = [
    { name: 'bundled (1 file)', dir: 'bundle-single', split: false, description: `${bundler.name}, every dependency and lazy command inlined into one ESM file` },
    { name: 'bundled (split)', dir: 'bundle-split', split: true, description: `${bundler.name}, dependencies bundled, lazy commands kept as chunks` },
  ];
  for (const v of variants) {
    const root = path.join(ctx.tmp, v.dir);
    const outDir = path.join(root, 'dist');
    mkdirSync(outDir, { recursive: true });
    // dist/cli.js reads ../package.json and migrate reads ../sql/ relative to itself.
    cpSync(path.join(ROOT, 'package.json'), path.join(root, 'package.json'));
    cpSync(path.join(ROOT, 'sql'), path.join(root, 'sql'), { recursive: true });
    const entry = path.join(root, 'entry.mjs');
    writeFileSync(entry, `import { main } from ${JSON.stringify(pathToFileURL(path.join(ROOT, 'dist', 'cli.js')).href)};\nprocess.exit(await main(process.argv));\n`);
    const t = performance.now();
    try {
      if (bundler.name === 'rolldown') {
        await bundler.build({
          input: { leasejob: entry }, platform: 'node', cwd: ROOT, external: ['pg-native'], logLevel: 'silent',
          output: { dir: outDir, format: 'esm', entryFileNames: '[name].mjs', chunkFileNames: '[name]-[hash].mjs', ...(v.split ? {} : { codeSplitting: false }) },
        });
      } else {
        await bundler.esbuild.build({
          entryPoints: { leasejob: entry }, bundle: true, platform: 'node', format: 'esm', outdir: outDir, outExtension: { '.js': '.mjs' },
          splitting: v.split, external: ['pg-native'], logLevel: 'silent',
          banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
        });
      }
    } catch (err) {
      notes.push(`${v.name}: build failed: ${err.message.split('\n')[0]}`);
      continue;
    }
    const buildMs = performance.now() - t;
    const file = path.join(outDir, 'leasejob.mjs');
    const bytes = readdirSync(outDir).reduce((a, f) => a + readFileSync(path.join(outDir, f)).length, 0);
    const check = await timed(NODE, [file, '--version'], { env: ctx.env, stdout: true });
    if (check.code !== 0) {
      notes.push(`${v.name}: the bundle does not run: ${check.stderr.slice(-200)}`);
      continue;
    }
    ok.push({ ...v, file, bytes, buildMs });
  }
  return { ok, notes };
}

