import type { Queryable } from '../db/client.js';
import { type WebhookEventName, webhookEvents } from '../db/schema/index.js';

export interface OutboxEvent {
  organizationId: number;
  projectId: number;
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
