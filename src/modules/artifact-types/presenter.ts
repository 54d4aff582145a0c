import type { ArtifactTypeRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { ArtifactType } from './schemas.js';

export const presentArtifactType = (row: ArtifactTypeRow): ArtifactType => ({
  id: row.id,
  slug: row.slug,
  name: row.name,
  description: row.description,
  category_id: row.categoryId,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
