import { and, eq, isNull } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { modelConfigurations } from '../../db/schema/index.js';
import { unprocessable } from '../../http/errors.js';

/** A live chat model configuration of the organization, or 422 naming `field`. */
export async function checkChatModelConfigurationId(
  db: Queryable,
  organizationId: number,
  id: number,
  field = 'model_configuration_id',
): Promise<number> {
  const [row] = await db
    .select({ purpose: modelConfigurations.purpose })
    .from(modelConfigurations)
    .where(
      and(
        eq(modelConfigurations.id, id),
        eq(modelConfigurations.organizationId, organizationId),
        isNull(modelConfigurations.deletedAt),
      ),
    );
  if (!row) {
    throw unprocessable(`Unknown model configuration: ${id}`, {
      [field]: [`does not exist in this organization: ${id}`],
    });
  }
  if (row.purpose !== 'chat') {
    throw unprocessable(`Model configuration ${id} is an embedding model`, {
      [field]: ['must be a model configuration with purpose chat'],
    });
  }
  return id;
}
