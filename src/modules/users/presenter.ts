import type { UserRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { User } from './schemas.js';

export const presentUser = (row: UserRow, groupIds: number[]): User => ({
  id: row.id,
  email: row.email,
  name: row.name,
  role: row.role,
  group_ids: groupIds,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
