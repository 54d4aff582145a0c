import type { EmbeddingModelV3 } from '@ai-sdk/provider';
import { embed, embedMany } from 'ai';
import { and, desc, eq, isNull } from 'drizzle-orm';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Queryable } from '../db/client.js';
import { modelConfigurations } from '../db/schema/index.js';
import { createEmbeddingModel } from '../llm/providers.js';
import type { ModelUrlRule } from '../net/model-base-url.js';

export interface EmbeddingModelChoice {
  configurationId: number;
  /** Null with `error` when the configuration cannot embed (provider without an embeddings API...). */
  model: EmbeddingModelV3 | null;
  error: string | null;
}

/**
 * The organization's embedding model: its newest model configuration with purpose `embedding`.
 * Null when it has none (documents are then searched by full text only, which is not an error).
 */
export async function embeddingModelFor(
  db: Queryable,
  secrets: SecretBox,
  organizationId: number,
  outbound: ModelUrlRule,
): Promise<EmbeddingModelChoice | null> {
  const [configuration] = await db
    .select()
    .from(modelConfigurations)
    .where(
      and(
        eq(modelConfigurations.organizationId, organizationId),
        eq(modelConfigurations.purpose, 'embedding'),
        isNull(modelConfigurations.deletedAt),
      ),
    )
    .orderBy(desc(modelConfigurations.id))
    .limit(1);
  if (!configuration) return null;
  try {
    const model = createEmbeddingModel({
      provider: configuration.provider,
      model: configuration.model,
      baseUrl: configuration.baseUrl,
      apiKey: configuration.apiKeyEncrypted ? secrets.decrypt(configuration.apiKeyEncrypted) : null,
      outbound,
    });
    return {
      configurationId: configuration.id,
      model,
      error: model
        ? null
        : `The embedding model configuration ${configuration.id} uses provider ${configuration.provider}, which has no embeddings API`,
    };
  } catch (err) {
    return {
      configurationId: configuration.id,
      model: null,
      error: `The embedding model configuration ${configuration.id} is unusable: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
}

const EMBED_TIMEOUT_MS = 120_000;

export async function embedTexts(model: EmbeddingModelV3, texts: string[]): Promise<number[][]> {
  const { embeddings } = await embedMany({
    model,
    values: texts,
    maxRetries: 2,
    maxParallelCalls: 2,
    abortSignal: AbortSignal.timeout(EMBED_TIMEOUT_MS),
  });
  if (embeddings.length !== texts.length)
    throw new Error(`The embedding model returned ${embeddings.length} vectors for ${texts.length} texts`);
  const dimensions = embeddings[0]?.length ?? 0;
  if (dimensions === 0 || embeddings.some((vector) => vector.length !== dimensions))
    throw new Error('The embedding model returned vectors of differing or zero length');
  return embeddings;
}

export async function embedQuery(
  model: EmbeddingModelV3,
  text: string,
  signal?: AbortSignal,
): Promise<number[]> {
  const timeout = AbortSignal.timeout(15_000);
  const { embedding } = await embed({
    model,
    value: text,
    maxRetries: 1,
    abortSignal: signal ? AbortSignal.any([signal, timeout]) : timeout,
  });
  return embedding;
}
