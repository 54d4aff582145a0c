import type { WebhookDeliveryRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { WebhookDelivery } from './schemas.js';

export const presentDelivery = (row: WebhookDeliveryRow): WebhookDelivery => ({
  id: row.id,
  webhook_id: row.webhookId,
  project_id: row.projectId,
  event_name: row.eventName,
  event_data: row.eventData,
  message_id: row.messageId,
  status: row.status,
  attempt_count: row.attemptCount,
  last_status_code: row.lastStatusCode,
  last_error: row.lastError,
  last_attempt_at: formatTimestamp(row.lastAttemptAt),
  next_attempt_at: formatTimestamp(row.nextAttemptAt),
  delivered_at: formatTimestamp(row.deliveredAt),
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
