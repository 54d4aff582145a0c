import { parseArgs } from 'node:util';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { eq } from 'drizzle-orm';
import { type Config, ConfigError, loadConfig } from './config.js';
import { createSecretBox, resolveSecret } from './crypto/secret-box.js';
import { type Database, migrateDatabase, openDatabase } from './db/client.js';
import { organizations, users } from './db/schema/index.js';
import { registerWorkers } from './jobs/workers.js';
import type { KeyKind } from './modules/api-keys/secrets.js';
import { insertApiKey } from './modules/api-keys/service.js';
import { bootstrap, NotEmptyError } from './modules/bootstrap/service.js';
import { createRoot } from './root.js';
import { shutdownTracing } from './telemetry/tracing.js';

const USAGE = `Usage: npm run --silent cli -- <command>

  migrate                                  apply database migrations
  bootstrap [--json] [--email E] [--organization NAME]
                                           create the first organization, project and keys (empty database only)
  keys create --organization ID --kind organization|personal|super_admin [--user ID] [--name N] [--json]
                                           create an API key and print it once
  worker                                   run background jobs only (no HTTP); stops on SIGTERM/SIGINT`;

class UsageError extends Error {}

/**
 * A worker-only process: the same job handlers as the server, sharing the queue with every other
 * process on the database, and no HTTP app.
 */
async function runWorker(database: Database, config: Config): Promise<number> {
  const root = await createRoot(config, { database });
  await registerWorkers(root, root.log);
  await root.jobs.start();
  root.log.info('worker started: running background jobs');
  const signal = await new Promise<string>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  root.log.info({ signal }, 'worker stopping: finishing running jobs');
  await root.close();
  await shutdownTracing().catch((err) => root.log.warn({ err }, 'could not flush the last traces'));
  return 0;
}

function positiveInt(value: string | undefined, flag: string): number {
  if (value === undefined || !/^\d+$/.test(value) || Number(value) < 1)
    throw new UsageError(`${flag} must be a positive integer`);
  return Number(value);
}

async function createKey(database: Database, args: string[]) {
  const { values } = parseArgs({
    args,
    options: {
      organization: { type: 'string' },
      kind: { type: 'string' },
      user: { type: 'string' },
      name: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  });
  const kind = values.kind as KeyKind;
  if (!['organization', 'personal', 'super_admin'].includes(kind)) {
    throw new UsageError('--kind must be organization, personal or super_admin');
  }
  const organizationId =
    kind === 'super_admin' && !values.organization
      ? null
      : positiveInt(values.organization, '--organization');
  if (organizationId !== null) {
    const [org] = await database.db.select().from(organizations).where(eq(organizations.id, organizationId));
    if (!org) throw new UsageError(`organization ${organizationId} does not exist`);
  }
  // As the API refuses it (422): an organization or super admin key belongs to no user.
  if (values.user !== undefined && kind !== 'personal')
    throw new UsageError('--user is only for personal keys');
  let userId: number | null = null;
  if (kind === 'personal') {
    userId = positiveInt(values.user, '--user');
    const [user] = await database.db.select().from(users).where(eq(users.id, userId));
    if (!user || user.organizationId !== organizationId)
      throw new UsageError(`user ${userId} is not in organization ${organizationId}`);
  }
  const { row, secret } = await insertApiKey(database.db, {
    organizationId: kind === 'super_admin' ? null : organizationId,
    userId,
    kind,
    name: values.name,
  });
  if (values.json) process.stdout.write(`${JSON.stringify({ id: row.id, key: secret })}\n`);
  else process.stdout.write(`Created ${kind} key ${row.id}: ${secret}\n(shown only once)\n`);
}

async function run(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === 'help' || command === '--help') {
    process.stdout.write(`${USAGE}\n`);
    return command ? 0 : 2;
  }
  const config = loadConfig();
  const database = await openDatabase(config);
  try {
    await migrateDatabase(database);
    switch (command) {
      case 'migrate':
        process.stderr.write('Migrations applied\n');
        return 0;
      case 'bootstrap': {
        const { values } = parseArgs({
          args: rest,
          options: {
            json: { type: 'boolean', default: false },
            email: { type: 'string' },
            organization: { type: 'string' },
          },
        });
        // The rule the API holds users' emails to (ajv-formats' `email`, src/http/validation.ts).
        if (values.email !== undefined && !(fullFormats.email as RegExp).test(values.email))
          throw new UsageError(`--email must be an email address, got "${values.email}"`);
        const secrets = createSecretBox(resolveSecret(config.secretKey, config.dataDir).secret);
        const result = await bootstrap(database, { config, secrets }, values);
        if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
        else
          process.stdout.write(
            `${Object.entries(result)
              .map(([k, v]) => `${k}: ${v}`)
              .join('\n')}\n`,
          );
        return 0;
      }
      case 'worker':
        return await runWorker(database, config);
      case 'keys':
        if (rest[0] !== 'create') throw new UsageError('keys supports: create');
        await createKey(database, rest.slice(1));
        return 0;
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } finally {
    await database.close();
  }
}

run(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof UsageError) process.stderr.write(`${err.message}\n\n${USAGE}\n`);
    else if (err instanceof ConfigError || err instanceof NotEmptyError)
      process.stderr.write(`${err.message}\n`);
    else process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(err instanceof UsageError ? 2 : 1);
  },
);
