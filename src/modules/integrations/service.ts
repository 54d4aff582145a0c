import { and, count, eq, inArray, isNull, like, or, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import { type Queryable, rowOf, selectList } from '../../db/client.js';
import { type IntegrationRow, integrationProjects, integrations, projects } from '../../db/schema/index.js';
import { ApiError, type Details, notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { type McpServerConfig, type McpTool, secretsOf } from '../../mcp/client-pool.js';
import { describeMcpError } from '../../mcp/errors.js';
import { namespacedToolName } from '../../mcp/tool-names.js';
import { checkOutboundUrl, OutboundUrlError } from '../../net/outbound.js';
import { requireAdmin } from '../../policies/roles.js';
import { unknownIdsError } from '../groups/references.js';
import { linkedIds, replaceLinks } from '../link-tables.js';
import { firstFreeSlug, retryOnSlugClash, slugOf, suffixedPattern } from '../slugs.js';
import type { CreateIntegrationBody, UpdateIntegrationBody } from './schemas.js';

/** Short enough that `<slug>__<tool>` leaves room for the tool within the 64 characters providers allow. */
const MAX_SLUG = 24;
const MAX_HEADERS = 50;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;
// Set by the transport itself; a stored value would break the protocol or the request framing.
const RESERVED_HEADERS = new Set([
  'accept',
  'connection',
  'content-length',
  'content-type',
  'expect',
  'host',
  'keep-alive',
  'last-event-id',
  'mcp-protocol-version',
  'mcp-session-id',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export interface IntegrationView {
  row: IntegrationRow;
  projectIds: number[];
}

const inOrg = (ctx: ServiceContext) => eq(integrations.organizationId, ctx.principal.organizationId);

async function withProjects(db: Queryable, rows: IntegrationRow[]): Promise<IntegrationView[]> {
  const byIntegration = await linkedIds(
    db,
    integrationProjects,
    integrationProjects.integrationId,
    integrationProjects.projectId,
    rows.map((r) => r.id),
  );
  return rows.map((row) => ({ row, projectIds: byIntegration.get(row.id) ?? [] }));
}

export async function listIntegrations(ctx: ServiceContext, page: PageQuery) {
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(integrations)
      .where(inOrg(ctx))
      .orderBy(integrations.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(integrations).where(inOrg(ctx)),
  ]);
  return { rows: await withProjects(ctx.db, rows), total };
}

async function findRow(ctx: ServiceContext, id: number): Promise<IntegrationRow> {
  const [row] = await ctx.db
    .select()
    .from(integrations)
    .where(and(eq(integrations.id, id), inOrg(ctx)));
  if (!row) throw notFound('Integration');
  return row;
}

export async function getIntegration(ctx: ServiceContext, id: number): Promise<IntegrationView> {
  const [view] = await withProjects(ctx.db, [await findRow(ctx, id)]);
  return view;
}

function checkUrl(ctx: ServiceContext, url: string): string {
  try {
    checkOutboundUrl(url.trim(), ctx.config.outboundAllowPrivate);
    return url.trim();
  } catch (error) {
    if (error instanceof OutboundUrlError) {
      throw unprocessable(`Validation failed: url ${error.message}`, { url: [error.message] });
    }
    throw error;
  }
}

/** Header names and values a request may carry; 422 naming each bad header. */
function checkHeaders(headers: Record<string, string>): Record<string, string> {
  const details: Details = {};
  const add = (message: string) => {
    details.headers = [...(details.headers ?? []), message];
  };
  const entries = Object.entries(headers);
  if (entries.length > MAX_HEADERS) add(`must have at most ${MAX_HEADERS} headers`);
  const seen = new Set<string>();
  for (const [name, value] of entries) {
    const lower = name.toLowerCase();
    if (!HEADER_NAME.test(name)) add(`"${name.slice(0, 100)}" is not a valid header name`);
    else if (RESERVED_HEADERS.has(lower)) add(`"${name}" is set by the connection and may not be given`);
    else if (seen.has(lower)) add(`"${name}" is given more than once`);
    // The value is never echoed: it is usually a credential.
    if (/[\r\n\0]/.test(value)) add(`the value of "${name}" must not contain line breaks`);
    if (value.length > 8192) add(`the value of "${name}" must be at most 8192 characters`);
    seen.add(lower);
  }
  if (details.headers)
    throw unprocessable(`Validation failed: headers ${details.headers.join('; ')}`, details);
  return headers;
}

/** The given project ids, deduplicated and sorted; 422 for ids that are not live projects of the organization. */
async function checkProjectIds(ctx: ServiceContext, ids: number[]): Promise<number[]> {
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return wanted;
  const found = await ctx.db
    .select({ id: projects.id })
    .from(projects)
    .where(
      and(
        eq(projects.organizationId, ctx.principal.organizationId),
        inArray(projects.id, wanted),
        isNull(projects.deletedAt),
      ),
    );
  const known = new Set(found.map((p) => p.id));
  const missing = wanted.filter((id) => !known.has(id));
  if (missing.length > 0) throw unknownIdsError('project_ids', 'projects', missing);
  return wanted.sort((a, b) => a - b);
}

function headerColumns(ctx: ServiceContext, headers: Record<string, string> | null | undefined) {
  const given = checkHeaders(headers ?? {});
  const names = Object.keys(given);
  return {
    headersEncrypted: names.length > 0 ? ctx.secrets.encrypt(JSON.stringify(given)) : null,
    headerNames: names,
  };
}

async function freeSlug(db: Queryable, organizationId: number, name: string): Promise<string> {
  const base = slugOf(name, 'integration').slice(0, MAX_SLUG).replace(/-+$/, '') || 'integration';
  const taken = await db
    .select({ slug: integrations.slug })
    .from(integrations)
    .where(
      and(
        eq(integrations.organizationId, organizationId),
        or(eq(integrations.slug, base), like(integrations.slug, suffixedPattern(base))),
      ),
    );
  return firstFreeSlug(
    base,
    taken.map((t) => t.slug),
  );
}

export async function createIntegration(ctx: ServiceContext, body: CreateIntegrationBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  const url = checkUrl(ctx, body.url);
  const headers = headerColumns(ctx, body.headers);
  const projectIds = await checkProjectIds(ctx, body.project_ids ?? []);
  const id = await retryOnSlugClash(() =>
    ctx.db.transaction(async (tx) => {
      const [row] = await tx
        .insert(integrations)
        .values({
          organizationId: orgId,
          name: body.name,
          slug: await freeSlug(tx, orgId, body.name),
          url,
          ...headers,
          allProjects: projectIds.length === 0,
          enabled: body.enabled ?? true,
        })
        .returning({ id: integrations.id });
      await replaceLinks(
        tx,
        integrationProjects,
        integrationProjects.integrationId,
        row.id,
        projectIds.map((projectId) => ({ integrationId: row.id, projectId })),
      );
      await recordAudit(tx, ctx, {
        action: 'integration.created',
        resource: { type: 'integration', id: row.id },
        changedFields: fieldsOf(body),
      });
      return row.id;
    }),
  );
  return getIntegration(ctx, id);
}

export async function updateIntegration(ctx: ServiceContext, id: number, body: UpdateIntegrationBody) {
  requireAdmin(ctx.principal);
  await findRow(ctx, id);
  const url = body.url === undefined ? undefined : checkUrl(ctx, body.url);
  const headers = body.headers === undefined ? {} : headerColumns(ctx, body.headers);
  const projectIds =
    body.project_ids === undefined ? undefined : await checkProjectIds(ctx, body.project_ids ?? []);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(integrations)
      .set({
        name: body.name,
        url,
        ...headers,
        enabled: body.enabled,
        ...(projectIds === undefined ? {} : { allProjects: projectIds.length === 0 }),
        updatedAt: sql`now()`,
      })
      .where(and(eq(integrations.id, id), inOrg(ctx)))
      .returning({ id: integrations.id });
    if (!row) throw notFound('Integration');
    if (projectIds !== undefined) {
      await replaceLinks(
        tx,
        integrationProjects,
        integrationProjects.integrationId,
        id,
        projectIds.map((projectId) => ({ integrationId: id, projectId })),
      );
    }
    await recordAudit(tx, ctx, {
      action: 'integration.updated',
      resource: { type: 'integration', id },
      changedFields: fieldsOf(body),
    });
  });
  // The open connection used the old URL or headers.
  await ctx.mcp.forget(id);
  return getIntegration(ctx, id);
}

export async function deleteIntegration(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .delete(integrations)
      .where(and(eq(integrations.id, id), inOrg(ctx)))
      .returning({ id: integrations.id });
    if (!row) throw notFound('Integration');
    await recordAudit(tx, ctx, { action: 'integration.deleted', resource: { type: 'integration', id } });
  });
  await ctx.mcp.forget(id);
}

/** The condition on `integrations i`, for an organization and a project (SQL expressions). */
export const integrationsOfProject = (organizationId: string, projectId: string) =>
  `i.organization_id = ${organizationId} and i.enabled
  and (i.all_projects or exists (
    select 1 from integration_projects ip where ip.integration_id = i.id and ip.project_id = ${projectId}))`;

/**
 * Enabled integrations of the organization that apply to the project (every project, or listed).
 * Read on every turn (the tool set), so hand-written: Drizzle's query building cost more CPU than
 * the statement (issue 14). Rows equal `db.select().from(integrations)`'s (rowOf).
 */
const INTEGRATIONS_FOR_PROJECT_SQL = `
select ${selectList(integrations, 'i')}
from integrations i
where ${integrationsOfProject('$1', '$2')}
order by i.id`;

/**
 * Rows a chat turn read with its start (src/turns/turn-open.ts, the same condition), taken by the
 * next integrationsForProject of that request context and project instead of a round trip.
 */
const readWithTurn = new WeakMap<ServiceContext, { projectId: number; rows: IntegrationRow[] }>();

export function provideIntegrations(ctx: ServiceContext, projectId: number, rows: IntegrationRow[]): void {
  readWithTurn.set(ctx, { projectId, rows });
}

export async function integrationsForProject(
  ctx: ServiceContext,
  projectId: number,
): Promise<IntegrationRow[]> {
  const known = readWithTurn.get(ctx);
  if (known?.projectId === projectId) {
    readWithTurn.delete(ctx);
    return known.rows;
  }
  const { rows } = await ctx.database.query(INTEGRATIONS_FOR_PROJECT_SQL, [
    ctx.principal.organizationId,
    projectId,
  ]);
  return rows.map((raw) => rowOf(integrations, raw));
}

/** What the client pool needs, with the headers decrypted only here. */
export function serverConfigOf(ctx: Pick<ServiceContext, 'secrets'>, row: IntegrationRow): McpServerConfig {
  return {
    id: row.id,
    version: row.updatedAt,
    url: row.url,
    headers: row.headersEncrypted ? JSON.parse(ctx.secrets.decrypt(row.headersEncrypted)) : {},
  };
}

/** The model-facing tools of one integration: the server's tools under namespaced names. */
export function namedTools(slug: string, tools: McpTool[]): { modelName: string; tool: McpTool }[] {
  const taken = new Set<string>();
  return tools.map((tool) => {
    const modelName = namespacedToolName(slug, tool.name, taken);
    taken.add(modelName);
    return { modelName, tool };
  });
}

export async function listIntegrationTools(ctx: ServiceContext, id: number) {
  const row = await findRow(ctx, id);
  const config = serverConfigOf(ctx, row);
  try {
    // An admin checking a server gets a fresh attempt, even right after a failure.
    const tools = await ctx.mcp.listTools(config, { recheck: true });
    return namedTools(row.slug, tools);
  } catch (error) {
    const reason = describeMcpError(error, secretsOf(config));
    ctx.log.warn({ integrationId: id, reason }, 'tool server unavailable');
    throw new ApiError(502, 'integration_unavailable', `The tool server could not be reached: ${reason}`);
  }
}
