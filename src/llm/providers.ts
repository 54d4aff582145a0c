import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import type { EmbeddingModelV3, LanguageModelV3 } from '@ai-sdk/provider';
import { guardedModelDispatcher, guardedModelFetch, type ModelUrlRule } from '../net/model-base-url.js';
import { tracingEnabled } from '../telemetry/tracing.js';
import { BuiltinLanguageModel } from './builtin-model.js';
import type { LeanModel } from './lean-client.js';

export interface ProviderSpec {
  /** No vendor endpoint to fall back on: a base URL is required. */
  needsBaseUrl: boolean;
  /** A model name is required (builtin has just one model). */
  needsModel: boolean;
  /** Has an embeddings API, so a configuration may have purpose `embedding`. */
  embeddings: boolean;
  /** May be named by LLM_PROVIDER for the bootstrap default model (builtin is the absence of one). */
  fromEnvironment: boolean;
}

/**
 * What each provider needs and supports: the one table read by config parsing (LLM_PROVIDER), the
 * request schema's enum, the model configuration checks and the model factories below.
 */
export const PROVIDERS = {
  'openai-compatible': { needsBaseUrl: true, needsModel: true, embeddings: true, fromEnvironment: true },
  openai: { needsBaseUrl: false, needsModel: true, embeddings: true, fromEnvironment: true },
  anthropic: { needsBaseUrl: false, needsModel: true, embeddings: false, fromEnvironment: true },
  builtin: { needsBaseUrl: false, needsModel: false, embeddings: false, fromEnvironment: false },
} as const satisfies Record<string, ProviderSpec>;

export type ProviderName = keyof typeof PROVIDERS;

export const PROVIDER_NAMES = Object.keys(PROVIDERS) as ProviderName[];

/** Providers LLM_PROVIDER may name. */
export type EnvironmentProvider = {
  [P in ProviderName]: (typeof PROVIDERS)[P]['fromEnvironment'] extends true ? P : never;
}[ProviderName];

export const ENVIRONMENT_PROVIDERS = PROVIDER_NAMES.filter(
  (name): name is EnvironmentProvider => PROVIDERS[name].fromEnvironment,
);

export interface ModelSettings {
  provider: ProviderName;
  model: string;
  /** Like the providers' own defaults, ends with `/v1`, e.g. `http://127.0.0.1:1234/v1`. */
  baseUrl: string | null;
  apiKey: string | null;
  /** Where the base URL may point: every request of the provider goes through this guard. */
  outbound: ModelUrlRule;
}

export class ProviderConfigurationError extends Error {
  override readonly name = 'ProviderConfigurationError';
}

export function isProviderName(value: unknown): value is ProviderName {
  return typeof value === 'string' && (PROVIDER_NAMES as readonly string[]).includes(value);
}

export function createLanguageModel(settings: ModelSettings): LanguageModelV3 {
  switch (settings.provider) {
    case 'openai-compatible':
      return openAICompatibleProvider(settings).chatModel(requireModel(settings));
    case 'openai':
      // The Chat Completions API (not Responses) so a custom base_url can point at any OpenAI-compatible server.
      return openAIProvider(settings).chat(requireModel(settings));
    case 'anthropic':
      return createAnthropic({
        baseURL: normalizeBaseUrl(settings.baseUrl),
        apiKey: apiKeyFor(settings),
        fetch: guardedModelFetch(settings.outbound),
      })(requireModel(settings));
    case 'builtin':
      return new BuiltinLanguageModel();
    default:
      throw new ProviderConfigurationError(`Unknown model provider: ${String(settings.provider)}`);
  }
}

/**
 * The lean client's target (llm/lean-client.ts) for the OpenAI Chat Completions providers, with
 * the same URL, key and guarded fetch as their AI SDK models; null for other providers, and for
 * `openai` without a key anywhere (the SDK model then reports the missing key, as before).
 */
export function leanModelOf(settings: ModelSettings): LeanModel | null {
  if (settings.provider !== 'openai-compatible' && settings.provider !== 'openai') return null;
  const model = requireModel(settings);
  let base = normalizeBaseUrl(settings.baseUrl);
  let apiKey: string | undefined;
  if (settings.provider === 'openai-compatible') {
    if (!base) return null; // openAICompatibleProvider reports it
    apiKey = settings.apiKey ?? undefined;
  } else {
    apiKey = apiKeyFor(settings) ?? process.env.OPENAI_API_KEY;
    if (apiKey === undefined) return null;
    base ??= 'https://api.openai.com/v1';
  }
  return {
    provider: settings.provider,
    model,
    url: `${base}/chat/completions`,
    headers: {
      'content-type': 'application/json',
      ...(apiKey !== undefined && (settings.provider === 'openai' || apiKey)
        ? { authorization: `Bearer ${apiKey}` }
        : {}),
    },
    dispatcher: guardedModelDispatcher(settings.outbound, tracingEnabled),
  };
}

/** Null when the provider has no embeddings API (Anthropic) or no real model (builtin). */
export function createEmbeddingModel(settings: ModelSettings): EmbeddingModelV3 | null {
  if (isProviderName(settings.provider) && !PROVIDERS[settings.provider].embeddings) return null;
  switch (settings.provider) {
    case 'openai-compatible':
      return openAICompatibleProvider(settings).embeddingModel(requireModel(settings));
    case 'openai':
      return openAIProvider(settings).embedding(requireModel(settings));
    default:
      throw new ProviderConfigurationError(`Unknown model provider: ${String(settings.provider)}`);
  }
}

function openAICompatibleProvider(settings: ModelSettings) {
  const baseURL = normalizeBaseUrl(settings.baseUrl);
  if (!baseURL) {
    throw new ProviderConfigurationError(
      'The openai-compatible provider needs a base URL, e.g. http://127.0.0.1:1234/v1',
    );
  }
  return createOpenAICompatible({
    name: 'openai-compatible',
    baseURL,
    apiKey: settings.apiKey ?? undefined,
    // Without this the provider omits stream_options.include_usage and streamed calls report no token usage.
    includeUsage: true,
    fetch: guardedModelFetch(settings.outbound),
  });
}

function openAIProvider(settings: ModelSettings) {
  return createOpenAI({
    baseURL: normalizeBaseUrl(settings.baseUrl),
    apiKey: apiKeyFor(settings),
    fetch: guardedModelFetch(settings.outbound),
  });
}

/**
 * With a custom endpoint and no key, send an empty key rather than letting the SDK fall back to
 * OPENAI_API_KEY / ANTHROPIC_API_KEY from the environment: that key belongs to the vendor, not to
 * whatever server base_url points at. With the vendor's default endpoint the env fallback is what users expect.
 */
function apiKeyFor(settings: ModelSettings): string | undefined {
  if (settings.apiKey) return settings.apiKey;
  return normalizeBaseUrl(settings.baseUrl) ? '' : undefined;
}

function normalizeBaseUrl(baseUrl: string | null): string | undefined {
  const trimmed = baseUrl?.trim().replace(/\/+$/, '');
  return trimmed ? trimmed : undefined;
}

function requireModel(settings: ModelSettings): string {
  const model = settings.model.trim();
  if (!model) throw new ProviderConfigurationError(`The ${settings.provider} provider needs a model name`);
  return model;
}
