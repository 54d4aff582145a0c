import type { InferSelectModel } from 'drizzle-orm';
import type { artifactTypes } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { ArtifactType } from './schemas.js';

export const presentArtifactType = (row: InferSelectModel<typeof artifactTypes>): ArtifactType => ({
  id: row.id,
  slug: row.slug,
  name: row.name,
  description: row.description,
  category_id: row.categoryId,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
