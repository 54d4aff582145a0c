import type { LanguageModelV3 } from '@ai-sdk/provider';
import type { SecretBox } from '../crypto/secret-box.js';
import type { ModelConfigurationRow } from '../db/schema/index.js';
import type { ModelUrlRule } from '../net/model-base-url.js';
import { createLanguageModel } from './providers.js';

/**
 * Provider models hold only their settings, so one serves every turn with the same settings: the
 * cache saves building a provider and decrypting its key on each turn (measurable at hundreds of
 * turns a second). Keyed by every setting, so an edited configuration gets a new model at once.
 * One per process, built by the composition root (src/root.ts).
 */
export class ModelCache {
  private static readonly MAX = 500;
  private readonly models = new Map<string, LanguageModelV3>();

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

  close(): void {
    this.models.clear();
  }
}
