import { startTracingIfConfigured } from './telemetry/start-tracing.js';

// A worker traces its jobs like the server (tracing starts before the application is loaded);
// the short commands do not. The commands themselves are src/cli-commands.ts.
if (process.argv[2] === 'worker') await startTracingIfConfigured();
await import('./cli-commands.js');
