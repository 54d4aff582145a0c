import { eq } from 'drizzle-orm';
import type { EventSourceMessage } from 'eventsource-parser';
import type { ServiceContext } from '../src/core/context.js';
import {
  apiKeys,
  artifactTypes,
  type CustomVariable,
  modelConfigurations,
  organizations,
  skillArtifactTypes,
  skills,
} from '../src/db/schema/index.js';
import type { TestApp, TestOrg } from './helpers/app.js';
import type { FakeModelServer } from './helpers/fake-model-server.js';
import { readSse } from './helpers/sse.js';

/**
 * Rows the management endpoints would create (artifact types, skills, model configurations),
 * written with Drizzle so these tests do not depend on another module's routes.
 */
export async function createArtifactType(t: TestApp, org: TestOrg, slug: string, name = slug) {
  const [row] = await t.deps.database.db
    .insert(artifactTypes)
    .values({ organizationId: org.organizationId, slug, name, description: `All about ${name}` })
    .returning();
  return row;
}

export async function createSkill(
  t: TestApp,
  org: TestOrg,
  options: { name: string; content: string; variables?: string[]; typeIds: number[] },
) {
  const variables: CustomVariable[] = (options.variables ?? []).map((name) => ({
    name,
    description: `The ${name}`,
    type: 'string',
  }));
  const [row] = await t.deps.database.db
    .insert(skills)
    .values({
      organizationId: org.organizationId,
      name: options.name,
      slug: `${options.name.toLowerCase().replace(/\W+/g, '-')}-${Math.random().toString(36).slice(2, 6)}`,
      content: options.content,
      customVariables: variables,
    })
    .returning();
  if (options.typeIds.length > 0) {
    await t.deps.database.db
      .insert(skillArtifactTypes)
      .values(options.typeIds.map((artifactTypeId) => ({ skillId: row.id, artifactTypeId })));
  }
  return row;
}

/** A model configuration pointing at the fake model server, made the organization's default. */
export async function useFakeModel(
  t: TestApp,
  org: TestOrg,
  fake: FakeModelServer,
  prices: { input: number; output: number } = { input: 0, output: 0 },
) {
  const [row] = await t.deps.database.db
    .insert(modelConfigurations)
    .values({
      organizationId: org.organizationId,
      name: 'Fake model',
      provider: 'openai-compatible',
      model: 'fake-model',
      baseUrl: fake.baseUrl,
      creditsPer1kInputTokens: prices.input,
      creditsPer1kOutputTokens: prices.output,
    })
    .returning();
  await t.deps.database.db
    .update(organizations)
    .set({ defaultModelConfigurationId: row.id })
    .where(eq(organizations.id, org.organizationId));
  return row;
}

export async function setBalance(t: TestApp, org: TestOrg, balance: number) {
  await t.deps.database.db
    .update(organizations)
    .set({ creditBalance: balance })
    .where(eq(organizations.id, org.organizationId));
}

export async function balanceOf(t: TestApp, org: TestOrg): Promise<number> {
  const [row] = await t.deps.database.db
    .select({ balance: organizations.creditBalance })
    .from(organizations)
    .where(eq(organizations.id, org.organizationId));
  return Number(row.balance);
}

export interface StreamResult {
  status: number;
  contentType: string;
  events: EventSourceMessage[];
  /** Parsed `data` of each event, in order. */
  data: any[];
  body: any;
}

/** A real HTTP POST to a streaming endpoint, read to the end (`readSse`). */
export async function postStream(
  t: TestApp,
  path: string,
  key: string,
  body: unknown,
): Promise<StreamResult> {
  const read = await readSse(`${t.baseUrl}${path}`, { key, body });
  return {
    status: read.status,
    contentType: read.headers.get('content-type') ?? '',
    events: read.events.map((e) => ({ id: e.id ?? '', event: e.event, data: JSON.stringify(e.data) })),
    data: read.events.map((e) => e.data),
    body: read.body,
  };
}

/** What a background job would build: a service context acting as the organization's key. */
export async function serviceContextFor(t: TestApp, org: TestOrg): Promise<ServiceContext> {
  const [key] = await t.deps.database.db
    .select({ id: apiKeys.id })
    .from(apiKeys)
    .where(eq(apiKeys.organizationId, org.organizationId))
    .limit(1);
  const context: ServiceContext = {
    db: t.deps.database.db,
    database: t.deps.database,
    config: t.deps.config,
    secrets: t.deps.secrets,
    models: t.deps.models,
    mcp: t.deps.mcp,
    vectors: t.deps.vectors,
    metrics: t.deps.metrics,
    requestId: null,
    principal: {
      kind: 'organization',
      keyId: key.id,
      organizationId: org.organizationId,
      userId: null,
      role: 'admin',
    },
    log: t.app.log,
  };
  return context;
}
