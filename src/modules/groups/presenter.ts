import type { GroupRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Group } from './schemas.js';

export const presentGroup = (row: GroupRow, userIds: number[]): Group => ({
  id: row.id,
  name: row.name,
  description: row.description,
  is_default: row.isDefault,
  user_ids: userIds,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
