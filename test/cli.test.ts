import { afterAll, describe, expect, it } from 'vitest';
import { projectDatabase, runCli, type ServiceDatabase, serviceEnv } from './helpers/server-process.js';

// DESIGN.md 3: the CLI refuses what the API would refuse, with a usage error (exit 2).
describe('the CLI refuses input the API would refuse', () => {
  let db: ServiceDatabase | undefined;
  afterAll(async () => {
    await db?.drop();
  });

  it('bootstrap --email that is not an email, and keys create --user for a key of no user', async () => {
    db = await projectDatabase();
    const env = serviceEnv(db.env);
    const badEmail = await runCli(['bootstrap', '--json', '--email', 'notanemail'], env);
    expect(badEmail.code, badEmail.stderr).toBe(2);
    expect(badEmail.stderr).toContain('--email must be an email address, got "notanemail"');
    expect(badEmail.stdout).toBe('');

    // Nothing was bootstrapped: a valid email still finds the database empty.
    const booted = await runCli(['bootstrap', '--json', '--email', 'ops@example.com'], env);
    expect(booted.code, booted.stderr).toBe(0);
    const { organization_id: organization, user_id: user } = JSON.parse(booted.stdout);

    const orgWithUser = await runCli(
      [
        'keys',
        'create',
        '--organization',
        String(organization),
        '--kind',
        'organization',
        '--user',
        String(user),
        '--json',
      ],
      env,
    );
    expect(orgWithUser.code, orgWithUser.stderr).toBe(2);
    expect(orgWithUser.stderr).toContain('--user is only for personal keys');
    const personal = await runCli(
      [
        'keys',
        'create',
        '--organization',
        String(organization),
        '--kind',
        'personal',
        '--user',
        String(user),
        '--json',
      ],
      env,
    );
    expect(personal.code, personal.stderr).toBe(0);
    expect(Object.keys(JSON.parse(personal.stdout))).toEqual(['id', 'key']);
    // Four CLI processes, each starting Node and opening the database: 15 s on a slow machine, and
    // past the default 30 s when the machine is loaded (it failed so once).
  }, 120_000);
});
