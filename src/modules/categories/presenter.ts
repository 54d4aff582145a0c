import type { CategoryRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Category } from './schemas.js';

export const presentCategory = (row: CategoryRow, groupIds: number[]): Category => ({
  id: row.id,
  name: row.name,
  description: row.description,
  group_ids: groupIds,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
