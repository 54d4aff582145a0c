import { mkdtempSync } from 'node:fs';
import path from 'node:path';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { pino } from 'pino';
import { expect, inject } from 'vitest';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { createSecretBox } from '../../src/crypto/secret-box.js';
import { registerWorkers } from '../../src/jobs/workers.js';
import { type BootstrapResult, bootstrap } from '../../src/modules/bootstrap/service.js';
import { createRoot, type Root, type RootOptions } from '../../src/root.js';
import { createTestDatabase, type TestDatabase } from './database.js';

export interface TestApp {
  app: FastifyInstance;
  /** The app's resources (the composition root); tests may change `toolFamilies` between requests. */
  deps: Root;
  testDb: TestDatabase;
  /** The bootstrap organization: its keys and ids. */
  boot: BootstrapResult;
  /** Set by startTestServer: http://127.0.0.1:PORT */
  baseUrl: string;
  close(): Promise<void>;
}

export const TEST_SECRET = 'test-secret-key-0123456789abcdef';

/** Environment for the app under test; each test may override any variable. */
export function testEnv(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    DATA_DIR: mkdtempSync(path.join(inject('testScratchDir'), 'app-')),
    LOG_LEVEL: 'silent',
    SECRET_KEY: TEST_SECRET,
    RATE_LIMIT_PER_MINUTE: '100000',
    // The fake model servers listen on loopback; everything else follows the outbound rule.
    MODEL_BASE_URL_ALLOW: '127.0.0.1:*',
    ...overrides,
  };
}

const bootstrapped = new WeakMap<TestDatabase, BootstrapResult>();

/** A silent logger for the resources (DEBUG_LOG=1 shows errors). */
export const testLog = () => pino({ level: process.env.DEBUG_LOG ? 'error' : 'silent' });

/**
 * The composition root of a test app: the test's database and secret, short job polling, and
 * whatever the test sets explicitly (tool families, turn and stream hub timings).
 */
export function createTestRoot(
  config: ReturnType<typeof loadConfig>,
  options: RootOptions & Pick<Required<RootOptions>, 'database'>,
): Promise<Root> {
  return createRoot(config, {
    log: testLog(),
    secrets: createSecretBox(TEST_SECRET),
    // Short polling so background jobs start quickly; stopping waits little for running handlers.
    jobOptions: { pollingIntervalSeconds: 0.5, stopTimeoutMs: 2000 },
    ...options,
  });
}

/** The real app on its own migrated database, bootstrapped, ready for `inject`. */
export async function buildTestApp(
  env: Record<string, string> = {},
  testDb?: TestDatabase,
  rootOptions: Omit<RootOptions, 'database'> = {},
): Promise<TestApp> {
  const config = loadConfig(testEnv(env));
  const db = testDb ?? (await createTestDatabase());
  const deps = await createTestRoot(config, { ...rootOptions, database: db.database });
  const app = await buildApp(deps, { logger: process.env.DEBUG_LOG ? { level: 'error' } : false });
  await app.ready();
  await registerWorkers(deps, app.log, { outboxIntervalMs: 200 });
  await deps.jobs.start();
  // A database reused by a second app (a restart) keeps the keys of its first bootstrap.
  const boot = (testDb && bootstrapped.get(testDb)) || (await bootstrap(db.database, deps));
  bootstrapped.set(db, boot);
  return {
    app,
    deps,
    testDb: db,
    boot,
    baseUrl: '',
    async close() {
      await app.close();
      await deps.close();
      if (!testDb) await db.drop();
    },
  };
}

/** Like buildTestApp, listening on a loopback port for real HTTP (streams, disconnects). */
export async function startTestServer(
  env: Record<string, string> = {},
  testDb?: TestDatabase,
  rootOptions: Omit<RootOptions, 'database'> = {},
): Promise<TestApp> {
  const t = await buildTestApp(env, testDb, rootOptions);
  const address = await t.app.listen({ port: 0, host: '127.0.0.1' });
  t.baseUrl = address;
  return t;
}

export interface ApiResponse {
  status: number;
  headers: LightMyRequestResponse['headers'];
  body: any;
  raw: LightMyRequestResponse;
}

export interface CallOptions extends Omit<InjectOptions, 'url' | 'method' | 'body'> {
  key?: string | null;
  body?: unknown;
}

/** `inject` with a bearer key and JSON parsing. */
export async function call(
  t: TestApp,
  method: string,
  url: string,
  options: CallOptions = {},
): Promise<ApiResponse> {
  const { key, body, headers, ...rest } = options;
  const res = await t.app.inject({
    method: method as any,
    url,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    ...(body === undefined ? {} : { payload: body as any }),
    ...rest,
  });
  let parsed: unknown = res.body;
  if (String(res.headers['content-type'] ?? '').includes('json') && res.body) parsed = res.json();
  return { status: res.statusCode, headers: res.headers, body: parsed, raw: res };
}

/** Asserts the status and prints the whole body when it differs. */
export function expectStatus(res: Pick<ApiResponse, 'status' | 'body'>, status: number) {
  expect({ status: res.status, body: res.body }).toMatchObject({ status });
}

export const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

export function expectV1Error(res: ApiResponse, status: number, code?: string) {
  expectStatus(res, status);
  expect(res.body).toEqual({
    error: { message: expect.any(String), code: code ?? expect.any(String), details: expect.any(Object) },
  });
}

export function expectV2Error(res: ApiResponse, status: number, code?: string) {
  expectStatus(res, status);
  expect(res.body).toMatchObject({
    status: 'error',
    response: { code: status, error: code ?? expect.any(String), message: expect.any(String) },
  });
}

/**
 * The data of a streamed 409 `error` event: the chat is busy with the turn it names (issue 17), as
 * the blocking 409's `response.running_turn`. Without `chatId`, any chat's stream URL.
 */
export function busyEventData(chatId?: number) {
  return {
    message: expect.any(String),
    code: 409,
    error: 'turn_in_progress',
    running_turn: {
      id: expect.any(Number),
      stream_url:
        chatId === undefined
          ? expect.stringMatching(/^\/api\/v2\/chats\/\d+\/stream$/)
          : `/api/v2/chats/${chatId}/stream`,
    },
  };
}

export interface TestOrg {
  organizationId: number;
  orgKey: string;
  adminUserId: number;
  /** Personal key of the admin user. */
  adminKey: string;
  defaultGroupId: number;
  projectId: number;
  modelConfigurationId: number;
}

/** A fresh organization through the admin API, with a personal admin key and a project in the default group. */
export async function createOrg(
  t: TestApp,
  name = `Org ${Math.random().toString(36).slice(2, 8)}`,
): Promise<TestOrg> {
  const created = await call(t, 'POST', '/api/v1/admin/organizations', {
    key: t.boot.super_admin_key,
    body: { organization: { name }, user: { email: `admin-${name.replace(/\W/g, '')}@example.com` } },
  });
  expectStatus(created, 201);
  const orgKey = created.body.key as string;
  const personal = await call(t, 'POST', '/api/v1/api_keys', {
    key: orgKey,
    body: { kind: 'personal', user_id: created.body.user.id },
  });
  expectStatus(personal, 201);
  const defaultGroupId = created.body.user.group_ids[0] as number;
  const projectRes = await call(t, 'POST', '/api/v1/projects', {
    key: orgKey,
    body: { name: 'Test project', use_default_group: true },
  });
  expectStatus(projectRes, 201);
  const project = { id: projectRes.body.project.id as number };
  return {
    organizationId: created.body.organization.id,
    orgKey,
    adminUserId: created.body.user.id,
    adminKey: personal.body.key,
    defaultGroupId,
    projectId: project.id,
    modelConfigurationId: created.body.organization.default_model_configuration_id,
  };
}

/** A member user (role member, default group) with a personal key. */
export async function createMember(
  t: TestApp,
  org: TestOrg,
  email = `m-${Math.random().toString(36).slice(2, 8)}@example.com`,
) {
  const user = await call(t, 'POST', '/api/v1/users', { key: org.orgKey, body: { email, role: 'member' } });
  expectStatus(user, 201);
  const key = await call(t, 'POST', '/api/v1/api_keys', {
    key: org.orgKey,
    body: { kind: 'personal', user_id: user.body.user.id },
  });
  expectStatus(key, 201);
  return { userId: user.body.user.id as number, key: key.body.key as string };
}
