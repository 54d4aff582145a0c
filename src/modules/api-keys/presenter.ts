import type { ApiKeyRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { ApiKey } from './schemas.js';

export const presentApiKey = (row: ApiKeyRow): ApiKey => ({
  id: row.id,
  kind: row.kind,
  name: row.name,
  prefix: row.prefix,
  user_id: row.userId,
  created_at: formatTimestamp(row.createdAt),
  last_used_at: formatTimestamp(row.lastUsedAt),
  revoked_at: formatTimestamp(row.revokedAt),
});
