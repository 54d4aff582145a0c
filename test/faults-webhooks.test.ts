/**
 * Webhook receivers that are down for a while, behind a real server process: one answering 503,
 * one not listening at all. Deliveries keep being retried and all arrive once the receivers are back.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import {
  bootstrapService,
  fakeModelEnv,
  freePort,
  killAllProcesses,
  projectDatabase,
  request,
  type ServerProcess,
  type ServiceDatabase,
  serviceEnv,
  sleep,
  startServer,
  waitUntil,
} from './helpers/server-process.js';
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';

const OUTAGE_MS = 4000;
const ARTIFACTS = 3;

/** A receiver on a fixed port that is started only when the test says so (until then: connection refused). */
function lateReceiver(port: number) {
  const received: Array<{ id: string; body: any }> = [];
  let server: Server | null = null;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received,
    async start() {
      server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          received.push({
            id: String(req.headers['webhook-id']),
            body: JSON.parse(Buffer.concat(chunks).toString('utf8')),
          });
          res.writeHead(200).end('ok');
        });
      });
      await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
    },
    async close() {
      server?.closeAllConnections();
      await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
    },
  };
}

describe('webhook receivers down for a while (real server process)', () => {
  let fake: FakeModelServer;
  let db: ServiceDatabase;
  let boot: BootstrapResult;
  let server: ServerProcess;
  let failing: WebhookReceiver;
  let late: ReturnType<typeof lateReceiver>;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    failing = await startWebhookReceiver();
    late = lateReceiver(await freePort());
    db = await projectDatabase();
    const env = serviceEnv({ ...db.env, ...fakeModelEnv(fake.baseUrl), WEBHOOK_RETRY_BASE_MS: '100' });
    boot = await bootstrapService(env);
    server = await startServer(env, { name: 'webhooks' });
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await failing?.close();
    await late?.close();
    await db?.drop();
  });

  const api = (method: string, path: string, body?: unknown) =>
    request(server.baseUrl, method, path, { key: boot.organization_key, body });

  async function created(method: string, path: string, body: unknown) {
    const res = await api(method, path, body);
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
    return res.body;
  }

  it('retries through a 503 outage and a refused connection, then delivers every event', async () => {
    const type = (await created('POST', '/api/v1/artifact_types', { name: 'Outage memo' })).artifact_type;
    const skill = (
      await created('POST', '/api/v1/skills', {
        name: 'Outage memo writer',
        content: 'Write a short memo.',
        artifact_type_ids: [type.id],
      })
    ).skill;
    const hooks: Array<{ id: number }> = [];
    for (const url of [`${failing.url}/hook`, late.url]) {
      hooks.push(
        (
          await created('POST', `/api/v1/projects/${boot.project_id}/webhooks`, {
            url,
            events: ['artifact_generated'],
          })
        ).webhook,
      );
    }

    failing.fallback = { status: 503, body: 'down for maintenance' };
    const outageStart = Date.now();
    const artifactIds: number[] = [];
    for (let n = 0; n < ARTIFACTS; n++) {
      fake.enqueue({ text: `Memo number ${n}` });
      const res = await created(
        'POST',
        `/api/v1/artifact_types/${type.slug}/artifacts?project_id=${boot.project_id}`,
        {
          skill_id: skill.id,
          inputs: [],
          name: `Memo ${n}`,
        },
      );
      artifactIds.push(res.artifact.id);
    }

    // Down: attempts keep coming, each answered 503; nothing reaches the unstarted receiver.
    await failing.waitFor(ARTIFACTS * 2, { timeoutMs: OUTAGE_MS });
    await sleep(Math.max(0, OUTAGE_MS - (Date.now() - outageStart)));
    const duringOutage = failing.received.length;
    const idsDuringOutage = new Set(failing.received.map((d) => d.headers['webhook-id']));
    expect(idsDuringOutage.size).toBe(ARTIFACTS);
    expect(duringOutage).toBeGreaterThanOrEqual(ARTIFACTS * 2);

    // Back: both receivers answer 200 from now on.
    failing.fallback = { status: 200, body: 'ok' };
    await late.start();
    const backAt = Date.now();
    const deliveriesOf = async (hookId: number) =>
      (await api('GET', `/api/v1/projects/${boot.project_id}/webhooks/${hookId}/deliveries`)).body
        .deliveries as Array<{
        status: string;
        attempt_count: number;
        last_status_code: number | null;
        message_id: string;
        event_data: { artifact_id: number };
      }>;
    await waitUntil(
      async () => {
        for (const hook of hooks) {
          const list = await deliveriesOf(hook.id);
          if (list.length !== ARTIFACTS || list.some((d) => d.status !== 'delivered')) return false;
        }
        return true;
      },
      { timeoutMs: 20_000, intervalMs: 250, what: 'every delivery to be delivered' },
    );
    // The longest retry delay reached in the outage is a few seconds at this base.
    expect(Date.now() - backAt).toBeLessThan(15_000);

    for (const hook of hooks) {
      const list = await deliveriesOf(hook.id);
      expect(list.map((d) => d.event_data.artifact_id).sort()).toEqual([...artifactIds].sort());
      for (const delivery of list) {
        expect(delivery.attempt_count).toBeGreaterThanOrEqual(2);
        expect(delivery.last_status_code).toBe(200);
      }
    }
    // Each event arrived with a 200 at both receivers, with the webhook-id of its earlier attempts.
    const answeredOk = failing.received.slice(duringOutage);
    expect(new Set(answeredOk.map((d) => d.headers['webhook-id']))).toEqual(idsDuringOutage);
    expect(answeredOk.map((d) => d.body.event_data.artifact_id).sort()).toEqual(
      expect.arrayContaining([...artifactIds].sort()),
    );
    expect(new Set(late.received.map((d) => d.body.event_data.artifact_id))).toEqual(new Set(artifactIds));
    expect(server.running, server.tail()).toBe(true);
  }, 60_000);
});
