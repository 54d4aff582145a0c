/** Worker-only processes (`cli worker`) sharing one database: every event delivered once. */
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { createSecretBox } from '../src/crypto/secret-box.js';
import { projectWebhooks } from '../src/db/schema/index.js';
import { recordEvent } from '../src/jobs/outbox.js';
import { bootstrap } from '../src/modules/bootstrap/service.js';
import { TEST_SECRET, testEnv } from './helpers/app.js';
import { backend } from './helpers/database.js';
import { baseEnv, type Proc, sharedDatabase, startProcess as start } from './helpers/processes.js';
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';

describe('worker processes', () => {
  const cleanup: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  function track(proc: Proc) {
    cleanup.push(async () => {
      if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
      await proc.exited;
    });
    return proc;
  }

  it(`worker-only processes deliver every event once (${backend === 'postgres' ? 'two workers' : 'one worker, PGlite'})`, async () => {
    const receiver: WebhookReceiver = await startWebhookReceiver();
    cleanup.push(() => receiver.close());
    const shared = await sharedDatabase();
    cleanup.push(() => shared.drop());

    const database = await shared.open();
    const config = loadConfig(testEnv());
    const secrets = createSecretBox(TEST_SECRET);
    const boot = await bootstrap(database, { config, secrets });
    await database.db.insert(projectWebhooks).values({
      organizationId: boot.organization_id,
      projectId: boot.project_id,
      url: receiver.url,
      events: ['artifact_generated'],
      secretEncrypted: secrets.encrypt(
        `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`,
      ),
    });
    for (let n = 0; n < 20; n++) {
      await database.db.transaction((tx) =>
        recordEvent(tx, {
          organizationId: boot.organization_id,
          projectId: boot.project_id,
          eventName: 'artifact_generated',
          eventData: { n },
        }),
      );
    }
    await shared.release(database);

    const workers = Array.from({ length: backend === 'postgres' ? 2 : 1 }, () =>
      track(start('src/cli.ts', ['worker'], baseEnv(shared.env))),
    );
    await receiver.waitFor(20, { timeoutMs: 40_000 });
    await new Promise((r) => setTimeout(r, 1500));
    const ids = receiver.received.map((d) => d.headers['webhook-id']);
    expect(receiver.received).toHaveLength(20);
    expect(new Set(ids).size).toBe(20);
    expect(receiver.received.map((d) => d.body.event_data.n).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 20 }, (_, n) => n),
    );

    for (const worker of workers) worker.child.kill('SIGTERM');
    const codes = await Promise.all(workers.map((w) => w.exited));
    expect(codes, workers.map((w) => w.lines.slice(-5).join('\n')).join('\n---\n')).toEqual(
      workers.map(() => 0),
    );
  }, 90_000);
});
