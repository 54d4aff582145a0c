import type { ProjectRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Project } from './schemas.js';

export interface ProjectLinks {
  groupIds: number[];
  categoryIds: number[];
}

export const presentProject = (row: ProjectRow, links: ProjectLinks): Project => ({
  id: row.id,
  name: row.name,
  overview: row.overview,
  group_ids: links.groupIds,
  category_ids: links.categoryIds,
  archived: row.archivedAt !== null,
  archived_at: formatTimestamp(row.archivedAt),
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
