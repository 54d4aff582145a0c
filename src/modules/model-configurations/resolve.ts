import type { LanguageModelV3 } from '@ai-sdk/provider';
import { and, eq, isNull } from 'drizzle-orm';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import { type ModelConfigurationRow, modelConfigurations, organizations } from '../../db/schema/index.js';
import { ApiError, badRequest, notFound, unprocessable } from '../../http/errors.js';
import type { Prices } from '../credits/service.js';

/**
 * The one way to pick a model configuration for chat work (turns, generations, an agent's pin):
 * the organization's live configuration, with purpose `chat`; when none is named, the fallbacks
 * in order, then the organization's default. Each API family reports a refusal its own way.
 */
export interface ModelRefusal {
  /** No live configuration with this id in the organization. */
  missing(id: number): ApiError;
  /** The configuration is an embedding model. */
  notChat(id: number): ApiError;
}

/** Chats (v2): 404 for an unknown id, 400 for an embedding model. */
export const CHAT_REFUSAL: ModelRefusal = {
  missing: () => notFound('Model configuration'),
  notChat: (id) =>
    badRequest(
      `Model configuration ${id} is an embedding model and cannot answer chats`,
      { model_configuration_id: ['is not a chat model'] },
      'invalid_model_configuration',
    ),
};

/** A v1 body field naming a configuration (an agent's pin): 422 naming the field. */
export const fieldRefusal = (field = 'model_configuration_id'): ModelRefusal => ({
  missing: (id) =>
    unprocessable(`Unknown model configuration: ${id}`, {
      [field]: [`does not exist in this organization: ${id}`],
    }),
  notChat: (id) =>
    unprocessable(`Model configuration ${id} is an embedding model`, {
      [field]: ['must be a model configuration with purpose chat'],
    }),
});

/** Artifact generation and refinement (v1): 404 for an unknown id, 422 for an embedding model. */
export const GENERATION_REFUSAL: ModelRefusal = {
  missing: () => notFound('Model configuration'),
  notChat: fieldRefusal().notChat,
};

async function liveConfiguration(db: Queryable, organizationId: number, id: number) {
  const [row] = await db
    .select()
    .from(modelConfigurations)
    .where(
      and(
        eq(modelConfigurations.id, id),
        eq(modelConfigurations.organizationId, organizationId),
        isNull(modelConfigurations.deletedAt),
      ),
    );
  return row ?? null;
}

/** A live chat model configuration of the organization, or the refusal's error. */
export async function chatModelConfiguration(
  db: Queryable,
  organizationId: number,
  id: number,
  refusal: ModelRefusal,
): Promise<ModelConfigurationRow> {
  return checkChatModel(id, await liveConfiguration(db, organizationId, id), refusal);
}

/** `chatModelConfiguration`'s checks on a looked-up live configuration (null: none). */
export function checkChatModel(
  id: number,
  row: ModelConfigurationRow | null,
  refusal: ModelRefusal,
): ModelConfigurationRow {
  if (!row) throw refusal.missing(id);
  if (row.purpose !== 'chat') throw refusal.notChat(id);
  return row;
}

/** The organization's default model configuration id; 500 when it has none (bootstrap always sets one). */
export async function defaultModelConfigurationId(db: Queryable, organizationId: number): Promise<number> {
  const [org] = await db
    .select({ id: organizations.defaultModelConfigurationId })
    .from(organizations)
    .where(eq(organizations.id, organizationId));
  if (!org?.id)
    throw new ApiError(500, 'no_default_model', 'The organization has no default model configuration');
  return org.id;
}

/**
 * The configuration to use: `requested` when given (refused if unusable), else the first usable
 * fallback (an agent's pin, the model that wrote an artifact; one that is gone or no longer a chat
 * model is skipped), else the organization's default.
 */
export async function chooseChatModel(
  db: Queryable,
  organizationId: number,
  choice: { requested?: number | null; fallbacks?: (number | null)[]; refusal: ModelRefusal },
): Promise<ModelConfigurationRow> {
  const { requested, fallbacks = [], refusal } = choice;
  if (requested !== undefined && requested !== null)
    return chatModelConfiguration(db, organizationId, requested, refusal);
  for (const id of fallbacks) {
    if (id === null) continue;
    const row = await liveConfiguration(db, organizationId, id);
    if (row?.purpose === 'chat') return row;
  }
  return chatModelConfiguration(
    db,
    organizationId,
    await defaultModelConfigurationId(db, organizationId),
    refusal,
  );
}

export interface ResolvedModel {
  configuration: ModelConfigurationRow;
  model: LanguageModelV3;
  prices: Prices;
}

/** The configuration with its language model (from the process's model cache) and prices. */
export function modelOf(
  ctx: Pick<ServiceContext, 'models'>,
  configuration: ModelConfigurationRow,
): ResolvedModel {
  return {
    configuration,
    model: ctx.models.languageModel(configuration),
    prices: {
      creditsPer1kInputTokens: Number(configuration.creditsPer1kInputTokens),
      creditsPer1kOutputTokens: Number(configuration.creditsPer1kOutputTokens),
    },
  };
}

/** The model for a generation: the named configuration, else the fallbacks, else the default (GENERATION_REFUSAL). */
export async function resolveModel(
  ctx: Pick<ServiceContext, 'db' | 'models' | 'principal'>,
  modelConfigurationId?: number | null,
  fallbacks: (number | null)[] = [],
): Promise<ResolvedModel> {
  const configuration = await chooseChatModel(ctx.db, ctx.principal.organizationId, {
    requested: modelConfigurationId,
    fallbacks,
    refusal: GENERATION_REFUSAL,
  });
  return modelOf(ctx, configuration);
}
