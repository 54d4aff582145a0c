import type { Config } from '../../config.js';
import type { SecretBox } from '../../crypto/secret-box.js';
import type { Queryable } from '../../db/client.js';
import { modelConfigurations } from '../../db/schema/index.js';

/** The model id shown for the built-in offline model. */
export const BUILTIN_MODEL = 'scriptorium-offline';

/** The model an organization starts with: the LLM_* provider if configured, else the built-in offline model. */
export async function insertDefaultModelConfiguration(
  tx: Queryable,
  deps: { config: Config; secrets: SecretBox },
  organizationId: number,
): Promise<number> {
  const llm = deps.config.llm;
  const values = llm
    ? {
        name: `${llm.provider} ${llm.model}`,
        provider: llm.provider,
        model: llm.model,
        baseUrl: llm.baseUrl,
        apiKeyEncrypted: llm.apiKey ? deps.secrets.encrypt(llm.apiKey) : null,
      }
    : { name: 'Built-in offline model', provider: 'builtin' as const, model: BUILTIN_MODEL };
  const [row] = await tx
    .insert(modelConfigurations)
    .values({ organizationId, ...values })
    .returning({ id: modelConfigurations.id });
  return row.id;
}
