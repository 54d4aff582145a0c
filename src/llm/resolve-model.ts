import type { LanguageModelV3 } from '@ai-sdk/provider';
import { and, eq, isNull } from 'drizzle-orm';
import type { ServiceContext } from '../core/context.js';
import { type ModelConfigurationRow, modelConfigurations, organizations } from '../db/schema/index.js';
import { ApiError, notFound } from '../http/errors.js';
import type { Prices } from '../modules/credits/service.js';

export interface ResolvedModel {
  configuration: ModelConfigurationRow;
  model: LanguageModelV3;
  prices: Prices;
}

/**
 * The model for a chat turn or a generation: the given configuration of the caller's organization,
 * else the organization's default. 404 `model_configuration_not_found` for an id the organization lacks.
 */
export async function resolveModel(
  ctx: Pick<ServiceContext, 'db' | 'models' | 'principal'>,
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
    model: ctx.models.languageModel(configuration),
    prices: {
      creditsPer1kInputTokens: Number(configuration.creditsPer1kInputTokens),
      creditsPer1kOutputTokens: Number(configuration.creditsPer1kOutputTokens),
    },
  };
}
