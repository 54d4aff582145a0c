import type { AuditEventRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { AuditEvent } from './schemas.js';

export const presentAuditEvent = (row: AuditEventRow): AuditEvent => ({
  id: row.id,
  organization_id: row.organizationId,
  occurred_at: formatTimestamp(row.occurredAt),
  actor: { api_key_id: row.actorApiKeyId, kind: row.actorKind, user_id: row.actorUserId },
  action: row.action,
  resource: { type: row.resourceType as AuditEvent['resource']['type'], id: row.resourceId },
  changed_fields: row.changedFields,
  request_id: row.requestId,
});
