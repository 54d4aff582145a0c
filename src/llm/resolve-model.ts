import type { LanguageModelV3 } from '@ai-sdk/provider';
import { and, eq, isNull } from 'drizzle-orm';
import { modelConfigurations, organizations } from '../db/schema/index.js';
import type { ServiceContext } from '../http/context.js';
import { ApiError, notFound } from '../http/errors.js';
import type { Prices } from '../modules/credits/service.js';
import { createLanguageModel } from './providers.js';

export type ModelConfigurationRow = typeof modelConfigurations.$inferSelect;

export interface ResolvedModel {
  configuration: ModelConfigurationRow;
  model: LanguageModelV3;
  prices: Prices;
}

/**
 * Provider models hold only their settings, so one serves every turn with the same settings: the
 * cache saves building a provider and decrypting its key on each turn (measurable at hundreds of
 * turns a second). Keyed by every setting, so an edited configuration gets a new model at once.
 */
const MODEL_CACHE_MAX = 500;
const modelCache = new Map<string, LanguageModelV3>();

/** The configuration's language model, with its stored key decrypted only here. */
export function languageModelOf(
  ctx: Pick<ServiceContext, 'secrets' | 'config'>,
  configuration: ModelConfigurationRow,
) {
  const cacheable = configuration.provider !== 'builtin';
  const outbound = {
    outboundAllowPrivate: ctx.config.outboundAllowPrivate,
    modelBaseUrlAllow: ctx.config.modelBaseUrlAllow,
  };
  const key = JSON.stringify([
    configuration.provider,
    configuration.model,
    configuration.baseUrl,
    configuration.apiKeyEncrypted,
    outbound,
  ]);
  const cached = cacheable ? modelCache.get(key) : undefined;
  if (cached) return cached;
  const model = createLanguageModel({
    provider: configuration.provider,
    model: configuration.model,
    baseUrl: configuration.baseUrl,
    apiKey: configuration.apiKeyEncrypted ? ctx.secrets.decrypt(configuration.apiKeyEncrypted) : null,
    outbound,
  });
  if (cacheable) {
    if (modelCache.size >= MODEL_CACHE_MAX) modelCache.clear();
    modelCache.set(key, model);
  }
  return model;
}

/**
 * The model for a chat turn or a generation: the given configuration of the caller's organization,
 * else the organization's default. 404 `model_configuration_not_found` for an id the organization lacks.
 */
export async function resolveModel(
  ctx: Pick<ServiceContext, 'db' | 'secrets' | 'principal' | 'config'>,
  modelConfigurationId?: number | null,
): Promise<ResolvedModel> {
  const orgId = ctx.principal.organizationId;
  let id = modelConfigurationId ?? null;
  if (id === null) {
    const [org] = await ctx.db
      .select({ id: organizations.defaultModelConfigurationId })
      .from(organizations)
      .where(eq(organizations.id, orgId));
    id = org?.id ?? null;
    if (id === null)
      throw new ApiError(500, 'no_default_model', 'The organization has no default model configuration');
  }
  const [configuration] = await ctx.db
    .select()
    .from(modelConfigurations)
    .where(
      and(
        eq(modelConfigurations.id, id),
        eq(modelConfigurations.organizationId, orgId),
        isNull(modelConfigurations.deletedAt),
      ),
    );
  if (!configuration) throw notFound('Model configuration');
  return {
    configuration,
    model: languageModelOf(ctx, configuration),
    prices: {
      creditsPer1kInputTokens: Number(configuration.creditsPer1kInputTokens),
      creditsPer1kOutputTokens: Number(configuration.creditsPer1kOutputTokens),
    },
  };
}
