import type { ProjectWebhookRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Webhook } from './schemas.js';

/** The signing secret is never part of this shape; only the create response adds it. */
export const presentWebhook = (row: ProjectWebhookRow): Webhook => ({
  id: row.id,
  project_id: row.projectId,
  url: row.url,
  events: row.events,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
