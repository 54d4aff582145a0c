import { sql } from 'drizzle-orm';
import { index, integer, jsonb, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { id, timestamps, tstz } from './columns.js';
import { organizations, projects } from './core.js';
import { projectWebhooks, webhookEvents } from './management.js';

export type WebhookDeliveryStatus = 'pending' | 'delivered' | 'failed';

/**
 * One message to one webhook: an outbox event fanned out to a subscribed webhook, or a test
 * event. Attempts update the row; the `webhook-id` header (`message_id`) never changes, so a
 * receiver can deduplicate retries and redeliveries.
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    /** The event's project (null for an organization event such as a document's). */
    projectId: integer('project_id').references(() => projects.id, { onDelete: 'cascade' }),
    webhookId: integer('webhook_id')
      .notNull()
      .references(() => projectWebhooks.id, { onDelete: 'cascade' }),
    /** Null for test events, which exist only as deliveries. */
    eventId: integer('event_id').references(() => webhookEvents.id, { onDelete: 'cascade' }),
    /** The Standard Webhooks `webhook-id`. */
    messageId: text('message_id').notNull(),
    eventName: text('event_name').notNull(),
    eventData: jsonb('event_data').$type<Record<string, unknown>>().notNull(),
    status: text('status').$type<WebhookDeliveryStatus>().notNull().default('pending'),
    attemptCount: integer('attempt_count').notNull().default(0),
    lastStatusCode: integer('last_status_code'),
    lastError: text('last_error'),
    lastAttemptAt: tstz('last_attempt_at'),
    nextAttemptAt: tstz('next_attempt_at'),
    deliveredAt: tstz('delivered_at'),
    /** Retries stop after this moment (about a day after the delivery was created or redelivered). */
    retryUntil: tstz('retry_until').notNull(),
    /**
     * Bumped whenever a new attempt is scheduled (retry, redeliver); a job carries the value it
     * was scheduled with, so a superseded job does nothing.
     */
    scheduleSeq: integer('schedule_seq').notNull().default(0),
    /** Set while an attempt is in flight; bounds concurrent attempts per webhook across processes. */
    leasedUntil: tstz('leased_until'),
    ...timestamps,
  },
  (t) => [
    index('webhook_deliveries_webhook_idx').on(t.webhookId, t.id),
    uniqueIndex('webhook_deliveries_event_unique')
      .on(t.webhookId, t.eventId)
      .where(sql`${t.eventId} is not null`),
    index('webhook_deliveries_leased_idx').on(t.webhookId).where(sql`${t.leasedUntil} is not null`),
  ],
);
export type WebhookDeliveryRow = typeof webhookDeliveries.$inferSelect;
