import { and, eq, gte, lt, type SQL, sql } from 'drizzle-orm';
import type { ServiceContext } from '../../core/context.js';
import { creditLedger, organizations } from '../../db/schema/index.js';
import { badRequest } from '../../http/errors.js';
import { requireAdminToRead } from '../../policies/roles.js';
import type { UsageQuery, UsageRow } from './schemas.js';

const DAY_MS = 86_400_000;

const groupColumn: Record<UsageQuery['group_by'], SQL> = {
  day: sql`to_char(date_trunc('day', ${creditLedger.createdAt} at time zone 'UTC'), 'YYYY-MM-DD')`,
  project: sql`${creditLedger.projectId}`,
  key: sql`${creditLedger.apiKeyId}`,
  model: sql`${creditLedger.modelConfigurationId}`,
};

const groupField = {
  day: 'day',
  project: 'project_id',
  key: 'api_key_id',
  model: 'model_configuration_id',
} as const;

/** The ledger's usage rows summed per day, project, key or model, for the caller's organization. */
export async function usageReport(ctx: ServiceContext, query: UsageQuery) {
  requireAdminToRead(ctx.principal, 'usage');
  const to = query.to ? new Date(query.to) : new Date();
  const from = query.from ? new Date(query.from) : new Date(to.getTime() - 30 * DAY_MS);
  if (from >= to) throw badRequest('from must be before to', { from: ['must be before to'] });
  const where = and(
    eq(creditLedger.organizationId, ctx.principal.organizationId),
    eq(creditLedger.kind, 'usage'),
    gte(creditLedger.createdAt, from.toISOString()),
    lt(creditLedger.createdAt, to.toISOString()),
    query.project_id ? eq(creditLedger.projectId, query.project_id) : undefined,
    query.model_configuration_id
      ? eq(creditLedger.modelConfigurationId, query.model_configuration_id)
      : undefined,
  );
  const group = groupColumn[query.group_by];
  const figures = {
    input: sql<number>`coalesce(sum(${creditLedger.inputTokens}), 0)::int`,
    output: sql<number>`coalesce(sum(${creditLedger.outputTokens}), 0)::int`,
    credits: sql<number>`coalesce(-sum(${creditLedger.amount}), 0)::float8`,
    requests: sql<number>`count(*)::int`,
  };
  const [rows, [totals], [org]] = await Promise.all([
    ctx.db
      .select({ group: group.mapWith(String), ...figures })
      .from(creditLedger)
      .where(where)
      .groupBy(group)
      .orderBy(group),
    ctx.db.select(figures).from(creditLedger).where(where),
    ctx.db
      .select({ balance: organizations.creditBalance })
      .from(organizations)
      .where(eq(organizations.id, ctx.principal.organizationId)),
  ]);
  const field = groupField[query.group_by];
  const toRow = (r: (typeof rows)[number]): UsageRow => ({
    [field]: field === 'day' ? r.group : r.group === null || r.group === 'null' ? null : Number(r.group),
    input_tokens: r.input,
    output_tokens: r.output,
    credits: Number(r.credits),
    requests: r.requests,
  });
  return {
    from: from.toISOString(),
    to: to.toISOString(),
    group_by: query.group_by,
    rows: rows.map(toRow),
    totals: {
      input_tokens: totals.input,
      output_tokens: totals.output,
      credits: Number(totals.credits),
      requests: totals.requests,
    },
    credit_balance: Number(org.balance),
  };
}
