/**
 * `npm run test:faults`: PostgreSQL (a private cluster) down for 30 s under a server and a
 * worker-only process. Both stay up and answer at once throughout; the webhook retries that fell
 * due during the outage, and new background work after it, all complete once the database is back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../../src/modules/bootstrap/service.js';
import { type FakeModelServer, startFakeModelServer } from '../helpers/fake-model-server.js';
import {
  bootstrapService,
  fakeModelEnv,
  killAllProcesses,
  type PrivatePostgres,
  privatePostgresAvailable,
  request,
  type ServerProcess,
  type ServiceProcess,
  serviceEnv,
  sleep,
  spawnService,
  startPrivatePostgres,
  startServer,
  waitUntil,
} from '../helpers/server-process.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const OUTAGE_MS = 30_000;

describe.runIf(privatePostgresAvailable())('a long PostgreSQL outage (private cluster)', () => {
  let cluster: PrivatePostgres;
  let fake: FakeModelServer;
  let receiver: WebhookReceiver;
  let boot: BootstrapResult;
  let server: ServerProcess;
  let worker: ServiceProcess;

  beforeAll(async () => {
    cluster = await startPrivatePostgres();
    const pg = await import('pg');
    const admin = new pg.default.Client({ connectionString: cluster.url() });
    await admin.connect();
    await admin.query('CREATE DATABASE scriptorium');
    await admin.end();
    fake = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    const env = serviceEnv({
      DATABASE_URL: cluster.url('scriptorium'),
      ...fakeModelEnv(fake.baseUrl),
      // The second attempts fall due in the outage (15 to 25 s after the first): none is in flight
      // when the database stops, so they all wait for it and run when it is back.
      WEBHOOK_RETRY_BASE_MS: '20000',
      LOG_LEVEL: 'info',
    });
    boot = await bootstrapService(env);
    worker = spawnService('worker', 'src/cli.ts', ['worker'], env);
    server = await startServer(env, { name: 'server' });
    await worker.waitForLine((line) => line.includes('worker started'), 60_000);
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await receiver?.close();
    await cluster?.destroy();
  });

  const api = (method: string, path: string, body?: unknown) =>
    request(server.baseUrl, method, path, { key: boot.organization_key, body, timeoutMs: 10_000 });

  it('both processes survive it, answer at once meanwhile, and every job completes afterwards', async () => {
    const type = await api('POST', '/api/v1/artifact_types', { name: 'Outage report' });
    const skill = await api('POST', '/api/v1/skills', {
      name: 'Outage reporter',
      content: 'Report on {custom.topic}.',
      custom_variables: [{ name: 'topic' }],
      artifact_type_ids: [type.body.artifact_type.id],
    });
    const hook = await api('POST', `/api/v1/projects/${boot.project_id}/webhooks`, {
      url: `${receiver.url}/outage`,
      events: ['artifact_generated'],
    });
    expect([type.status, skill.status, hook.status]).toEqual([201, 201, 201]);
    const generate = (topic: string, fireAndForget: boolean) =>
      api(
        'POST',
        `/api/v1/artifact_types/${type.body.artifact_type.slug}/artifacts?project_id=${boot.project_id}`,
        {
          skill_id: skill.body.skill.id,
          inputs: [{ name: 'topic', value: topic }],
          name: `Report on ${topic}`,
          fire_and_forget: fireAndForget,
        },
      );

    // Before the outage: three events whose deliveries the receiver refuses.
    receiver.fallback = { status: 503 };
    const before: number[] = [];
    for (const topic of ['alpha', 'beta', 'gamma']) {
      const res = await generate(topic, false);
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      before.push(res.body.artifact.id);
    }
    await receiver.waitFor(3, { timeoutMs: 15_000 });
    await waitUntil(
      async () => {
        const list = await api(
          'GET',
          `/api/v1/projects/${boot.project_id}/webhooks/${hook.body.webhook.id}/deliveries`,
        );
        return (
          list.body.deliveries.length === 3 && list.body.deliveries.every((d: any) => d.attempt_count === 1)
        );
      },
      { timeoutMs: 10_000, what: 'the first attempts to be recorded' },
    );

    await cluster.stop('fast');
    const downAt = Date.now();
    const answers: Array<{ status: number; ms: number }> = [];
    const readiness: number[] = [];
    while (Date.now() - downAt < OUTAGE_MS) {
      const started = Date.now();
      const res = await api('GET', '/api/v2/chats');
      answers.push({ status: res.status, ms: Date.now() - started });
      readiness.push((await request(server.baseUrl, 'GET', '/ready', { timeoutMs: 5000 })).status);
      expect(server.running, server.tail()).toBe(true);
      expect(worker.running, worker.tail()).toBe(true);
      await sleep(500);
    }
    expect(new Set(readiness)).toEqual(new Set([503]));
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([500]));
    expect(Math.max(...answers.map((a) => a.ms))).toBeLessThan(3000);

    receiver.fallback = { status: 200, body: 'ok' };
    await cluster.start();
    await waitUntil(async () => (await request(server.baseUrl, 'GET', '/ready')).status === 200, {
      timeoutMs: 15_000,
      what: '/ready to answer 200 again',
    });
    const after = await generate('delta', true);
    expect(after.status, JSON.stringify(after.body)).toBe(200);

    // The refused deliveries catch up, and the background generation after the outage is delivered.
    const delivered = await receiver.waitFor(1, {
      timeoutMs: 60_000,
      match: (d) => d.body?.event_data?.api_async_create_event_id === after.body.api_async_create_event_id,
    });
    expect(delivered).toHaveLength(1);
    await waitUntil(
      async () => {
        const ok = receiver.received.filter((d) => d.at > downAt + OUTAGE_MS);
        return before.every((id) => ok.some((d) => d.body.event_data.artifact_id === id));
      },
      { timeoutMs: 60_000, intervalMs: 250, what: 'the deliveries refused before the outage' },
    );
    expect(server.running && worker.running).toBe(true);

    worker.child.kill('SIGTERM');
    expect(await server.stop()).toBe(0);
    expect((await worker.exited).code).toBe(0);
  }, 180_000);
});
