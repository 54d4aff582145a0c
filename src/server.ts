import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { isEmpty } from './db/client.js';
import { registerWorkers } from './jobs/workers.js';
import { firstStartBlock, portInUseMessage } from './modules/bootstrap/first-start.js';
import { bootstrap, NotEmptyError } from './modules/bootstrap/service.js';
import { createRoot } from './root.js';
import { shutdownTracing } from './telemetry/tracing.js';

async function main() {
  const config = loadConfig();
  // Every shared resource, built once (src/root.ts); the app and the job handlers receive them.
  const root = await createRoot(config);
  const app = await buildApp(root);
  // Bound before bootstrapping: a port in use must not cost the first start its keys. Requests that
  // arrive meanwhile wait until start-up is complete (keys logged, workers running).
  let startedUp!: () => void;
  const startUp = new Promise<void>((resolve) => {
    startedUp = resolve;
  });
  app.addHook('onRequest', () => startUp);
  await app.listen({ port: config.port, host: config.host });

  if (await isEmpty(root.database)) {
    try {
      const keys = await bootstrap(root.database, root);
      // The one time keys are logged: the first start of an empty database (DESIGN.md section 3).
      app.log.info({ bootstrap: keys }, 'Bootstrapped an empty database; these keys are shown only once');
      if (process.stdout.isTTY) process.stdout.write(`${firstStartBlock(keys, config.publicBaseUrl)}\n`);
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
    // The app first (no new requests; running turns finish or are cancelled), then the resources,
    // whatever the app's close did: the queue and the database are always closed in order.
    let code = 0;
    try {
      await app.close();
    } catch (err) {
      app.log.error({ err }, 'could not close the HTTP server cleanly');
      code = 1;
    }
    await root.close();
    await shutdownTracing().catch((err) => app.log.warn({ err }, 'could not flush the last traces'));
    app.log.info({ code }, 'shut down');
    process.exit(code);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

  await registerWorkers(root, app.log);
  await root.jobs.start();
  startedUp();
}

main().catch((err) => {
  if (err instanceof ConfigError) {
    console.error(`Configuration error: ${err.message}`);
  } else if (err?.code === 'EADDRINUSE') {
    const config = loadConfig();
    console.error(portInUseMessage(config.host, config.port));
  } else {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  }
  process.exit(1);
});
