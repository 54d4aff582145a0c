import type { FastifyBaseLogger } from 'fastify';
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { createSecretBox, resolveSecret } from './crypto/secret-box.js';
import { isEmpty, migrateDatabase, openDatabase } from './db/client.js';
import { createJobQueue } from './jobs/queue.js';
import { registerWorkers } from './jobs/workers.js';
import { firstStartBlock, portInUseMessage } from './modules/bootstrap/first-start.js';
import { bootstrap, NotEmptyError } from './modules/bootstrap/service.js';

async function main() {
  const config = loadConfig();
  const database = await openDatabase(config);
  await migrateDatabase(database);
  const secret = resolveSecret(config.secretKey, config.dataDir);
  // The queue exists before the app (it is one of the app's deps); it logs through the app's logger.
  const queueLog: { log?: FastifyBaseLogger } = {};
  const jobs = await createJobQueue(database, {
    onError: (err) => queueLog.log?.error({ err }, 'background job queue error'),
  });
  const deps = {
    config,
    database,
    secrets: createSecretBox(secret.secret),
    jobs,
    turnSettings: { leaseMs: config.turnLeaseMs, modelIdleMs: config.modelIdleTimeoutMs },
  };
  const app = await buildApp(deps);
  queueLog.log = app.log;
  // Bound before bootstrapping: a port in use must not cost the first start its keys. Requests that
  // arrive meanwhile wait until start-up is complete (keys logged, workers running).
  let startedUp!: () => void;
  const startUp = new Promise<void>((resolve) => {
    startedUp = resolve;
  });
  app.addHook('onRequest', () => startUp);
  await app.listen({ port: config.port, host: config.host });
  if (secret.generated && database.kind === 'postgres') {
    app.log.warn(
      'SECRET_KEY is not set: using a key generated in DATA_DIR; set SECRET_KEY when several processes share the database',
    );
  }

  if (await isEmpty(database)) {
    try {
      const keys = await bootstrap(database, deps);
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
    await app.close();
    await jobs.stop();
    await database.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

  await registerWorkers(deps, app.log);
  await jobs.start();
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
