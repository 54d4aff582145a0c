import type { ModelConfigurationRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { ModelConfiguration } from './schemas.js';

/** The stored key stays out: only whether one exists. */
export const presentModelConfiguration = (
  row: ModelConfigurationRow,
  isDefault: boolean,
): ModelConfiguration => ({
  id: row.id,
  name: row.name,
  provider: row.provider,
  model: row.model,
  base_url: row.baseUrl,
  purpose: row.purpose,
  is_default: isDefault,
  has_api_key: row.apiKeyEncrypted !== null,
  credits_per_1k_input_tokens: Number(row.creditsPer1kInputTokens),
  credits_per_1k_output_tokens: Number(row.creditsPer1kOutputTokens),
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
