import type { IntegrationRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Integration } from './schemas.js';

/** Header values never leave the service; only their names are shown. */
export const presentIntegration = (row: IntegrationRow, projectIds: number[]): Integration => ({
  id: row.id,
  name: row.name,
  slug: row.slug,
  url: row.url,
  header_names: row.headerNames,
  all_projects: row.allProjects,
  project_ids: row.allProjects ? [] : projectIds,
  enabled: row.enabled,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
