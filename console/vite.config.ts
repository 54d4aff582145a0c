import { gzipSync } from 'node:zlib';
import { defineConfig, type Plugin } from 'vite';

/** The first load (entry chunk and what it imports statically) must stay under this, gzipped. */
const FIRST_LOAD_BUDGET_BYTES = 250 * 1024;

/** Prints the gzipped size of the JavaScript a first visit loads, and fails the build over budget. */
function firstLoadBudget(): Plugin {
  return {
    name: 'first-load-budget',
    apply: 'build',
    generateBundle(_options, bundle) {
      const seen = new Set<string>();
      const visit = (file: string) => {
        const chunk = bundle[file];
        if (seen.has(file) || !chunk || chunk.type !== 'chunk') return;
        seen.add(file);
        for (const imported of chunk.imports) visit(imported);
      };
      for (const [file, chunk] of Object.entries(bundle)) {
        if (chunk.type === 'chunk' && chunk.isEntry) visit(file);
      }
      let total = 0;
      for (const file of seen) {
        const chunk = bundle[file];
        if (chunk.type === 'chunk') total += gzipSync(chunk.code).length;
      }
      const kb = (total / 1024).toFixed(1);
      const line = `console: first-load JavaScript ${kb} kB gzipped (${seen.size} file(s); budget ${FIRST_LOAD_BUDGET_BYTES / 1024} kB)`;
      if (total > FIRST_LOAD_BUDGET_BYTES) this.error(`${line}: over budget`);
      this.info(line);
      process.stdout.write(`${line}\n`);
    },
  };
}

export default defineConfig({
  root: import.meta.dirname,
  base: '/console/',
  // Preact's automatic JSX runtime, without a Babel-based plugin.
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Everything the console runs is a file of its own: nothing inline for the CSP to allow.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: 'es2022',
  },
  plugins: [firstLoadBudget()],
  logLevel: 'warn',
});
