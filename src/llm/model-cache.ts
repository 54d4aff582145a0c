import type { LanguageModelV3 } from '@ai-sdk/provider';
import type { SecretBox } from '../crypto/secret-box.js';
import type { ModelConfigurationRow } from '../db/schema/index.js';
import type { ModelUrlRule } from '../net/model-base-url.js';
import type { LeanModel } from './lean-client.js';
import { createLanguageModel, leanModelOf } from './providers.js';

/**
 * Provider models hold only their settings, so one serves every turn with the same settings: the
 * cache saves building a provider and decrypting its key on each turn (measurable at hundreds of
 * turns a second). Keyed by every setting, so an edited configuration gets a new model at once.
 * One per process, built by the composition root (src/root.ts).
 */
export class ModelCache {
  private static readonly MAX = 500;
  private readonly models = new Map<string, LanguageModelV3>();
  private readonly leanModels = new Map<string, LeanModel | null>();

  constructor(
    private readonly secrets: SecretBox,
    /** Where base URLs may point (the process's OUTBOUND_ALLOW_PRIVATE and MODEL_BASE_URL_ALLOW). */
    private readonly outbound: ModelUrlRule,
  ) {}

  /** The configuration's language model, with its stored key decrypted only here. */
  languageModel(configuration: ModelConfigurationRow): LanguageModelV3 {
    const cacheable = configuration.provider !== 'builtin';
    const key = JSON.stringify([
      configuration.provider,
      configuration.model,
      configuration.baseUrl,
      configuration.apiKeyEncrypted,
    ]);
    const cached = cacheable ? this.models.get(key) : undefined;
    if (cached) return cached;
    const model = createLanguageModel({
      provider: configuration.provider,
      model: configuration.model,
      baseUrl: configuration.baseUrl,
      apiKey: configuration.apiKeyEncrypted ? this.secrets.decrypt(configuration.apiKeyEncrypted) : null,
      outbound: this.outbound,
    });
    if (cacheable) {
      if (this.models.size >= ModelCache.MAX) this.models.clear();
      this.models.set(key, model);
    }
    return model;
  }

  /**
   * The configuration's lean streaming client (llm/lean-client.ts) for chat turns, or null when
   * the provider is not an OpenAI Chat Completions one (those stay on the AI SDK).
   */
  leanModel(configuration: ModelConfigurationRow): LeanModel | null {
    if (configuration.provider !== 'openai-compatible' && configuration.provider !== 'openai') return null;
    const key = JSON.stringify([
      configuration.provider,
      configuration.model,
      configuration.baseUrl,
      configuration.apiKeyEncrypted,
    ]);
    const cached = this.leanModels.get(key);
    if (cached !== undefined) return cached;
    const model = leanModelOf({
      provider: configuration.provider,
      model: configuration.model,
      baseUrl: configuration.baseUrl,
      apiKey: configuration.apiKeyEncrypted ? this.secrets.decrypt(configuration.apiKeyEncrypted) : null,
      outbound: this.outbound,
    });
    if (this.leanModels.size >= ModelCache.MAX) this.leanModels.clear();
    this.leanModels.set(key, model);
    return model;
  }

  close(): void {
    this.models.clear();
    this.leanModels.clear();
  }
}
