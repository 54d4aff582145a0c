import { and, count, eq, isNull, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import {
  agents,
  type ModelConfigurationRow,
  modelConfigurations,
  organizations,
} from '../../db/schema/index.js';
import { type Details, notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { PROVIDERS, type ProviderName } from '../../llm/providers.js';
import { assertModelBaseUrlAllowed, type ModelUrlRule } from '../../net/model-base-url.js';
import { OutboundUrlError } from '../../net/outbound.js';
import { requireAdmin } from '../../policies/roles.js';
import { BUILTIN_MODEL } from './defaults.js';
import type { CreateModelConfigurationBody, Purpose, UpdateModelConfigurationBody } from './schemas.js';

const live = (organizationId: number) =>
  and(eq(modelConfigurations.organizationId, organizationId), isNull(modelConfigurations.deletedAt))!;

async function defaultIdOf(db: Queryable, organizationId: number): Promise<number | null> {
  const [org] = await db
    .select({ id: organizations.defaultModelConfigurationId })
    .from(organizations)
    .where(eq(organizations.id, organizationId));
  return org?.id ?? null;
}

export async function listModelConfigurations(ctx: ServiceContext, page: PageQuery) {
  const orgId = ctx.principal.organizationId;
  const [rows, [{ total }], defaultId] = await Promise.all([
    ctx.db
      .select()
      .from(modelConfigurations)
      .where(live(orgId))
      .orderBy(modelConfigurations.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(modelConfigurations).where(live(orgId)),
    defaultIdOf(ctx.db, orgId),
  ]);
  return { rows: rows.map((row) => ({ row, isDefault: row.id === defaultId })), total };
}

async function findConfiguration(db: Queryable, ctx: ServiceContext, id: number) {
  const [row] = await db
    .select()
    .from(modelConfigurations)
    .where(and(live(ctx.principal.organizationId), eq(modelConfigurations.id, id)));
  if (!row) throw notFound('Model configuration');
  return row;
}

const withDefault = async (db: Queryable, organizationId: number, row: ModelConfigurationRow) => ({
  row,
  isDefault: (await defaultIdOf(db, organizationId)) === row.id,
});

export async function getModelConfiguration(ctx: ServiceContext, id: number) {
  return withDefault(ctx.db, ctx.principal.organizationId, await findConfiguration(ctx.db, ctx, id));
}

interface Settings {
  provider: ProviderName;
  model: string | null;
  baseUrl: string | null;
  purpose: Purpose;
  isDefault: boolean;
}

/** What the providers need to work (src/llm/providers.ts), checked when saved rather than at first use. */
function settingsProblems(s: Settings, rule: ModelUrlRule): Details {
  const details: Details = {};
  if (s.baseUrl !== null) {
    let url: URL | null = null;
    try {
      url = new URL(s.baseUrl);
    } catch {}
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      details.base_url = ['must be an http or https URL'];
    } else {
      // The outbound rule of webhooks and tool servers, plus the operator's MODEL_BASE_URL_ALLOW.
      try {
        assertModelBaseUrlAllowed(s.baseUrl, rule);
      } catch (err) {
        if (!(err instanceof OutboundUrlError)) throw err;
        details.base_url = [err.message];
      }
    }
  } else if (PROVIDERS[s.provider].needsBaseUrl) {
    details.base_url = [`is required for the ${s.provider} provider`];
  }
  if (s.model === null && PROVIDERS[s.provider].needsModel)
    details.model = [`is required for the ${s.provider} provider`];
  if (s.purpose === 'embedding') {
    if (!PROVIDERS[s.provider].embeddings) {
      details.purpose = [`the ${s.provider} provider has no embedding models`];
    } else if (s.isDefault) {
      details.is_default = ['the default model answers chats, so it must have purpose chat'];
    }
  }
  return details;
}

function check(settings: Settings, rule: ModelUrlRule) {
  const details = settingsProblems(settings, rule);
  if (Object.keys(details).length > 0) {
    throw unprocessable(
      `Invalid model configuration: ${Object.entries(details)
        .map(([field, messages]) => `${field} ${messages.join(', ')}`)
        .join('; ')}`,
      details,
    );
  }
}

async function makeDefault(tx: Queryable, organizationId: number, id: number) {
  await tx
    .update(organizations)
    .set({ defaultModelConfigurationId: id, updatedAt: sql`now()` })
    .where(eq(organizations.id, organizationId));
}

export async function createModelConfiguration(ctx: ServiceContext, body: CreateModelConfigurationBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  const settings: Settings = {
    provider: body.provider,
    model: body.model ?? (body.provider === 'builtin' ? BUILTIN_MODEL : null),
    baseUrl: body.base_url ?? null,
    purpose: body.purpose ?? 'chat',
    isDefault: body.is_default === true,
  };
  check(settings, ctx.config);
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .insert(modelConfigurations)
      .values({
        organizationId: orgId,
        name: body.name,
        provider: settings.provider,
        model: settings.model!,
        baseUrl: settings.baseUrl,
        apiKeyEncrypted: body.api_key ? ctx.secrets.encrypt(body.api_key) : null,
        purpose: settings.purpose,
        creditsPer1kInputTokens: body.credits_per_1k_input_tokens ?? 0,
        creditsPer1kOutputTokens: body.credits_per_1k_output_tokens ?? 0,
      })
      .returning();
    if (settings.isDefault) await makeDefault(tx, orgId, row.id);
    await recordAudit(tx, ctx, {
      action: 'model_configuration.created',
      resource: { type: 'model_configuration', id: row.id },
      changedFields: fieldsOf(body),
    });
    return { row, isDefault: settings.isDefault };
  });
}

/**
 * PUT: any subset, checked as a whole after merging. `api_key` absent keeps the stored key, null
 * removes it. `is_default: true` moves the default here; the default itself cannot be unset
 * (make another configuration the default instead).
 */
export async function updateModelConfiguration(
  ctx: ServiceContext,
  id: number,
  body: UpdateModelConfigurationBody,
) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    const current = await findConfiguration(tx, ctx, id);
    const wasDefault = (await defaultIdOf(tx, orgId)) === id;
    if (wasDefault && body.is_default === false) {
      throw unprocessable(
        'The organization needs a default model: make another configuration the default instead',
        { is_default: ['cannot be unset on the default model configuration'] },
        'default_model_configuration',
      );
    }
    const provider = body.provider ?? current.provider;
    const settings: Settings = {
      provider,
      model: body.model ?? (body.provider === 'builtin' ? BUILTIN_MODEL : current.model),
      baseUrl: body.base_url === undefined ? current.baseUrl : body.base_url,
      purpose: body.purpose ?? current.purpose,
      isDefault: wasDefault || body.is_default === true,
    };
    check(settings, ctx.config);
    const [row] = await tx
      .update(modelConfigurations)
      .set({
        name: body.name,
        provider: settings.provider,
        model: settings.model!,
        baseUrl: settings.baseUrl,
        apiKeyEncrypted:
          body.api_key === undefined
            ? undefined
            : body.api_key === null
              ? null
              : ctx.secrets.encrypt(body.api_key),
        purpose: settings.purpose,
        creditsPer1kInputTokens: body.credits_per_1k_input_tokens,
        creditsPer1kOutputTokens: body.credits_per_1k_output_tokens,
        updatedAt: sql`now()`,
      })
      .where(eq(modelConfigurations.id, id))
      .returning();
    if (settings.isDefault && !wasDefault) await makeDefault(tx, orgId, id);
    await recordAudit(tx, ctx, {
      action: 'model_configuration.updated',
      resource: { type: 'model_configuration', id },
      changedFields: fieldsOf(body),
    });
    return { row, isDefault: settings.isDefault };
  });
}

/**
 * Soft delete (chats and ledger rows keep their reference). The default cannot go; agents pinned
 * to the configuration fall back to the default.
 */
export async function deleteModelConfiguration(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  await ctx.db.transaction(async (tx) => {
    await findConfiguration(tx, ctx, id);
    if ((await defaultIdOf(tx, orgId)) === id) {
      throw unprocessable(
        'The default model configuration cannot be deleted: make another configuration the default first',
        { id: ['is the default model configuration'] },
        'default_model_configuration',
      );
    }
    await tx
      .update(modelConfigurations)
      .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
      .where(eq(modelConfigurations.id, id));
    await tx
      .update(agents)
      .set({ modelConfigurationId: null, updatedAt: sql`now()` })
      .where(and(eq(agents.organizationId, orgId), eq(agents.modelConfigurationId, id)));
    await recordAudit(tx, ctx, {
      action: 'model_configuration.deleted',
      resource: { type: 'model_configuration', id },
    });
  });
}
