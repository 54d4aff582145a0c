import { createServer, type Server } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { firstStartBlock } from '../src/modules/bootstrap/first-start.js';
import {
  freePort,
  killAllProcesses,
  projectDatabase,
  type ServiceDatabase,
  serviceEnv,
  spawnService,
  startServer,
} from './helpers/server-process.js';

afterAll(() => killAllProcesses());

// Issue 16, item 12: `npm start` on a port in use.
describe('npm start on a port in use', () => {
  let holder: Server | undefined;
  let db: ServiceDatabase | undefined;
  afterAll(async () => {
    holder?.close();
    await db?.drop();
  });

  it('says so in one line, bootstraps nothing, and the next start still shows the keys', async () => {
    db = await projectDatabase();
    const port = await freePort();
    holder = createServer();
    await new Promise<void>((resolve) => holder!.listen(port, '127.0.0.1', resolve));
    const env = serviceEnv({ ...db.env, LOG_LEVEL: 'info' });

    const refused = spawnService('busy-port', 'src/main.ts', [], {
      ...env,
      PORT: String(port),
      HOST: '127.0.0.1',
    });
    const { code } = await refused.exited;
    expect(code, refused.tail()).toBe(1);
    const errors = refused.lines.filter((line) => !line.startsWith('{'));
    expect(errors, refused.tail()).toEqual([
      `Cannot listen on 127.0.0.1:${port}: the port is in use by another process. Stop it, or set PORT to a free port.`,
    ]);
    expect(refused.lines.some((line) => line.includes('Bootstrapped'))).toBe(false);

    await new Promise((resolve) => holder!.close(resolve));
    holder = undefined;
    const server = await startServer(env, { port });
    try {
      const line = await server.waitForLine((l) => l.includes('Bootstrapped an empty database'));
      const keys = JSON.parse(line).bootstrap;
      expect(keys.organization_key).toMatch(/^sk_org_/);
      // Keys logged before the first request is answered: they work at once.
      const res = await fetch(`${server.baseUrl}/api/v1/projects`, {
        headers: { authorization: `Bearer ${keys.organization_key}` },
      });
      expect(res.status).toBe(200);
    } finally {
      await server.stop();
    }
    // Two cold starts of the service (PGlite migrates a fresh directory each time): slow on a busy machine.
  }, 120_000);

  it('prints the first-start keys as a readable block for a terminal', () => {
    const block = firstStartBlock(
      {
        organization_id: 1,
        user_id: 1,
        default_group_id: 1,
        project_id: 1,
        model_configuration_id: 1,
        super_admin_key: 'sk_adm_x',
        organization_key: 'sk_org_y',
        personal_key: 'sk_usr_z',
      },
      'http://127.0.0.1:3000',
    );
    expect(block).toContain('Organization key      sk_org_y');
    expect(block).toContain('Super admin key       sk_adm_x');
    expect(block).toContain('shown only once');
    expect(block).toContain('http://127.0.0.1:3000/docs');
  });
});
