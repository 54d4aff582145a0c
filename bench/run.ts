/**
 * `npm run bench`: the burst and request-rate benchmark (bench/burst.ts), or with `--closed-loop`
 * issue 14's closed-loop method (bench/closed-loop.ts). Each reads its own options; see bench/README.md.
 */
if (process.argv.includes('--closed-loop')) await import('./closed-loop.js');
else await import('./burst.js');
