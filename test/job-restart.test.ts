/** A server killed (SIGKILL) with a fire-and-forget request running; the next server finishes it. */
import { afterEach, describe, expect, it } from 'vitest';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { baseEnv, freePort, type Proc, sharedDatabase, startProcess as start } from './helpers/processes.js';
import { startWebhookReceiver } from './helpers/webhook-receiver.js';

describe('server restart', () => {
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

  it('finishes a fire-and-forget request after the server that accepted it was killed', async () => {
    const fake: FakeModelServer = await startFakeModelServer();
    cleanup.push(() => fake.close());
    const receiver = await startWebhookReceiver();
    cleanup.push(() => receiver.close());
    const shared = await sharedDatabase();
    cleanup.push(() => shared.drop());
    const port = await freePort();
    const env = baseEnv({
      ...shared.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      LLM_PROVIDER: 'openai-compatible',
      LLM_BASE_URL: fake.baseUrl,
      LLM_MODEL: 'fake-model',
    });
    const base = `http://127.0.0.1:${port}/api/v1`;

    // The first server bootstraps the empty database and logs the keys once.
    const first = track(start('src/main.ts', [], env));
    const bootLine = await first.waitForLine((l) => l.includes('"bootstrap"'));
    const keys = JSON.parse(bootLine).bootstrap as { organization_key: string; project_id: number };
    await first.waitForLine((l) => l.includes('Server listening'));
    const api = async (method: string, url: string, body?: unknown) => {
      const res = await fetch(`${base}${url}`, {
        method,
        headers: { authorization: `Bearer ${keys.organization_key}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    const type = await api('POST', '/artifact_types', { name: 'Memo' });
    expect(type.status).toBe(201);
    const skill = await api('POST', '/skills', {
      name: 'Memo writer',
      content: 'Write a memo.',
      artifact_type_ids: [type.body.artifact_type.id],
    });
    expect(skill.status).toBe(201);
    const hook = await api('POST', `/projects/${keys.project_id}/webhooks`, {
      url: receiver.url,
      events: ['artifact_generated', 'artifact_generation_failed'],
    });
    expect(hook.status).toBe(201);

    // The model never answers this process: it dies with the job running.
    fake.setResponder(() => ({ hang: true }));
    const slug = type.body.artifact_type.slug;
    const accepted = await api('POST', `/artifact_types/${slug}/artifacts?project_id=${keys.project_id}`, {
      skill_id: skill.body.skill.id,
      inputs: [],
      fire_and_forget: true,
    });
    expect(accepted.status).toBe(200);
    const id = accepted.body.api_async_create_event_id as string;
    const deadline = Date.now() + 15_000;
    while (fake.requests.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(fake.requests.length).toBeGreaterThan(0);
    first.child.kill('SIGKILL');
    await first.exited;

    // A running job is presumed dead once it outlives its expiry (REPLY_TIMEOUT_MS plus a margin,
    // minutes by default); the test moves its start back instead of waiting that long.
    const database = await shared.open();
    const { rows } = await database.query<{ id: string }>(
      `update pgboss.job set started_on = now() - interval '1 hour'
        where name = 'artifacts-async' and state = 'active' returning id`,
    );
    expect(rows).toHaveLength(1);
    await shared.release(database);

    fake.setResponder(() => ({ text: '# Recovered memo\n\nWritten after the restart.' }));
    const second = track(start('src/main.ts', [], env));
    await second.waitForLine((l) => l.includes('Server listening'));
    const [delivery] = await receiver.waitFor(1, {
      timeoutMs: 30_000,
      match: (d) => d.body?.event_data?.api_async_create_event_id === id,
    });
    expect(delivery.body.event_name).toBe('artifact_generated');
    const status = await api('GET', `/async_requests/${id}`);
    expect(status.body.async_request).toMatchObject({
      status: 'generated',
      artifact_id: delivery.body.event_data.artifact_id,
    });
    const artifact = await api(
      'GET',
      `/artifact_types/${slug}/artifacts/${delivery.body.event_data.artifact_id}`,
    );
    expect(artifact.body.artifact.content).toContain('Written after the restart.');

    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  }, 120_000);
});
