import type { InferSelectModel } from 'drizzle-orm';
import type { categories } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Category } from './schemas.js';

export const presentCategory = (row: InferSelectModel<typeof categories>, groupIds: number[]): Category => ({
  id: row.id,
  name: row.name,
  description: row.description,
  group_ids: groupIds,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
