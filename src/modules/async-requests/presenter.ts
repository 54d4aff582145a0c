import type { AsyncRequestRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { AsyncRequest } from './schemas.js';

export const presentAsyncRequest = (row: AsyncRequestRow): AsyncRequest => ({
  id: row.id,
  status: row.status,
  artifact_id: row.artifactId,
  artifact_type_slug: row.artifactTypeSlug,
  project_id: row.projectId,
  error: row.error,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
