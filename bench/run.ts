/**
 * `npm run bench`: the burst and request-rate benchmark (bench/burst.ts), with `--closed-loop`
 * issue 14's closed-loop method (bench/closed-loop.ts), with `--rates` issue 14's plain request
 * rates, service pinned (bench/rates.ts). Each reads its own options; see bench/README.md.
 */
if (process.argv.includes('--closed-loop')) await import('./closed-loop.js');
else if (process.argv.includes('--rates')) await import('./rates.js');
else await import('./burst.js');
