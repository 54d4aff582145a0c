import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { isEmpty } from './db/client.js';
import { registerWorkers } from './jobs/workers.js';
import { bootstrap, NotEmptyError } from './modules/bootstrap/service.js';
import { createRoot } from './root.js';
import { shutdownTracing } from './telemetry/tracing.js';

async function main() {
  const config = loadConfig();
  // Every shared resource, built once (src/root.ts); the app and the job handlers receive them.
  const root = await createRoot(config);
  const app = await buildApp(root);

  if (await isEmpty(root.database)) {
    try {
      const keys = await bootstrap(root.database, root);
      // The one time keys are logged: the first start of an empty database (DESIGN.md section 3).
      app.log.info({ bootstrap: keys }, 'Bootstrapped an empty database; these keys are shown only once');
    } catch (err) {
      if (!(err instanceof NotEmptyError)) throw err;
    }
  }

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, 'shutting down: finishing in-flight requests');
    const force = setTimeout(() => {
      app.log.warn('grace period over; exiting with requests still open');
      process.exit(1);
    }, config.shutdownGraceMs);
    force.unref();
    // The app first (no new requests; running turns finish or are cancelled), then the resources.
    await app.close();
    await root.close();
    await shutdownTracing().catch((err) => app.log.warn({ err }, 'could not flush the last traces'));
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

  await registerWorkers(root, app.log);
  await root.jobs.start();
  await app.listen({ port: config.port, host: config.host });
}

main().catch((err) => {
  if (err instanceof ConfigError) {
    console.error(`Configuration error: ${err.message}`);
  } else {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  }
  process.exit(1);
});
