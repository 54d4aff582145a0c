import { sql } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { type WebhookEventName, webhookEvents } from '../db/schema/index.js';

export interface OutboxEvent {
  organizationId: number;
  /** Null for an organization event (documents): only organization webhooks receive it. */
  projectId: number | null;
  eventName: WebhookEventName;
  eventData: Record<string, unknown>;
}

/**
 * Records a webhook event. Call it with the transaction that makes the change the event reports:
 * the event then exists exactly when the change does. Delivery happens later, in jobs.
 */
export async function recordEvent(
  tx: Queryable,
  event: OutboxEvent,
): Promise<{ id: number; eventId: string }> {
  const [row] = await tx
    .insert(webhookEvents)
    .values(event)
    .returning({ id: webhookEvents.id, eventId: webhookEvents.eventId });
  return row;
}

/**
 * Records the event only when a webhook that would receive it exists (its project's, or its
 * organization's), in one statement: frequent events (every chat turn, every document) leave the
 * outbox empty for organizations that subscribe to none. A webhook created at the same moment as
 * the change may miss it, as it would miss any earlier event.
 */
export async function recordEventIfSubscribed(tx: Queryable, event: OutboxEvent): Promise<void> {
  await tx.execute(sql`
    insert into webhook_events (organization_id, project_id, event_name, event_data)
    select ${event.organizationId}::int, ${event.projectId}::int, ${event.eventName}::text,
      ${JSON.stringify(event.eventData)}::jsonb
    where exists (
      select 1 from project_webhooks
      where organization_id = ${event.organizationId}::int
        and (project_id is null or project_id = ${event.projectId}::int)
        and events @> jsonb_build_array(${event.eventName}::text)
    )`);
}
