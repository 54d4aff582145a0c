import { index, integer, jsonb, pgTable, text } from 'drizzle-orm/pg-core';
import { id, tstz } from './columns.js';
import { organizations } from './core.js';

/**
 * Who changed what: one row per write through the API, inserted in the transaction of the write
 * (src/audit/record.ts), so a change and its record exist together. Field names only, never values.
 * No foreign key to the key or user: the record outlives them and must never block their removal.
 */
export const auditEvents = pgTable(
  'audit_events',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    occurredAt: tstz('occurred_at').notNull().defaultNow(),
    actorApiKeyId: integer('actor_api_key_id').notNull(),
    actorKind: text('actor_kind', { enum: ['organization', 'personal', 'super_admin'] }).notNull(),
    actorUserId: integer('actor_user_id'),
    action: text('action').notNull(),
    resourceType: text('resource_type').notNull(),
    resourceId: integer('resource_id').notNull(),
    changedFields: jsonb('changed_fields').$type<string[]>().notNull().default([]),
    requestId: text('request_id'),
  },
  (t) => [
    index('audit_events_org_id_idx').on(t.organizationId, t.id),
    index('audit_events_org_time_idx').on(t.organizationId, t.occurredAt),
  ],
);
export type AuditEventRow = typeof auditEvents.$inferSelect;
