/**
 * Prints the OpenAPI document of the app as built (`app.ready(); app.swagger()`), without a
 * server or a database on disk: `npm run --silent openapi > openapi.json`. The environment is
 * fixed (not read from the shell), so the output is the same on every machine and CI can diff
 * the TypeScript client generated from it (`npm run client:generate`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { pino } from 'pino';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { createSecretBox } from '../src/crypto/secret-box.js';
import { openDatabase } from '../src/db/client.js';
import { createRoot } from '../src/root.js';

const SECRET = 'openapi-dump-secret-0123456789';

async function openApiDocument(): Promise<unknown> {
  const config = loadConfig({ LOG_LEVEL: 'silent', SECRET_KEY: SECRET, DATA_DIR: '/nonexistent' });
  // An in-memory database that is never migrated: building the app queries nothing.
  const database = await openDatabase({ databaseUrl: null, dataDir: config.dataDir, pglite: new PGlite() });
  const root = await createRoot(config, {
    database,
    secrets: createSecretBox(SECRET),
    log: pino({ level: 'silent' }),
  });
  const app = await buildApp(root, { logger: false });
  try {
    await app.ready();
    return app.swagger();
  } finally {
    await app.close();
    await root.close();
    await database.close();
  }
}

const out = process.argv[2];
const text = `${JSON.stringify(await openApiDocument(), null, 2)}\n`;
if (out) {
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, text);
} else process.stdout.write(text);
