import { startTracingIfConfigured } from './telemetry/start-tracing.js';

// Tracing (when configured) starts before the application is loaded, so its instrumentations see
// `http`, `pg` and `undici` arrive; the server itself is src/server.ts.
await startTracingIfConfigured();
await import('./server.js');
