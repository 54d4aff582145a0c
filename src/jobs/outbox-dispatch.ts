import { and, asc, inArray, isNull, or, sql } from 'drizzle-orm';
import { projectWebhooks, webhookDeliveries, webhookEvents } from '../db/schema/index.js';
import { type DeliveryDeps, RETRY_WINDOW_HOURS, scheduleAttempt } from './webhook-delivery.js';

/** Events fanned out per transaction; the rest wait for the next round. */
const BATCH = 100;

/** The Standard Webhooks `webhook-id` of an event: the same on every attempt and redelivery. */
export const messageIdOf = (eventId: string) => `msg_${eventId.replace(/-/g, '')}`;

/**
 * Fans undispatched outbox events out to the subscribed webhooks of their project and of their
 * organization (webhooks without a project): one delivery
 * row and one job per webhook, and the event marked dispatched, all in one transaction. Rows are
 * claimed with SKIP LOCKED, so every process can run this at once without dispatching twice.
 * Returns how many events were dispatched.
 */
export async function dispatchPendingEvents(deps: DeliveryDeps): Promise<number> {
  return deps.database.db.transaction(async (tx) => {
    const events = await tx
      .select()
      .from(webhookEvents)
      .where(isNull(webhookEvents.dispatchedAt))
      .orderBy(asc(webhookEvents.id))
      .limit(BATCH)
      .for('update', { skipLocked: true });
    if (events.length === 0) return 0;

    // The events' projects' webhooks, and their organizations' webhooks (no project: every event).
    const projectIds = [...new Set(events.flatMap((e) => (e.projectId === null ? [] : [e.projectId])))];
    const organizationIds = [...new Set(events.map((e) => e.organizationId))];
    const hooks = await tx
      .select({
        id: projectWebhooks.id,
        organizationId: projectWebhooks.organizationId,
        projectId: projectWebhooks.projectId,
        events: projectWebhooks.events,
      })
      .from(projectWebhooks)
      .where(
        or(
          projectIds.length > 0 ? inArray(projectWebhooks.projectId, projectIds) : undefined,
          and(inArray(projectWebhooks.organizationId, organizationIds), isNull(projectWebhooks.projectId)),
        ),
      );

    const rows = events.flatMap((event) =>
      hooks
        .filter(
          (hook) =>
            (hook.projectId === null || hook.projectId === event.projectId) &&
            hook.organizationId === event.organizationId &&
            (hook.events as string[]).includes(event.eventName),
        )
        .map((hook) => ({
          organizationId: event.organizationId,
          projectId: event.projectId,
          webhookId: hook.id,
          eventId: event.id,
          messageId: messageIdOf(event.eventId),
          eventName: event.eventName,
          eventData: event.eventData,
          retryUntil: sql`now() + make_interval(hours => ${RETRY_WINDOW_HOURS})`,
        })),
    );
    if (rows.length > 0) {
      const created = await tx
        .insert(webhookDeliveries)
        .values(rows)
        .onConflictDoNothing()
        .returning({ id: webhookDeliveries.id });
      for (const delivery of created) {
        await scheduleAttempt(deps.jobs, { deliveryId: delivery.id, seq: 0 }, { db: tx });
      }
    }
    await tx
      .update(webhookEvents)
      .set({ dispatchedAt: sql`now()` })
      .where(
        and(
          inArray(
            webhookEvents.id,
            events.map((e) => e.id),
          ),
          isNull(webhookEvents.dispatchedAt),
        ),
      );
    return events.length;
  });
}

/**
 * Dispatches until the outbox is empty (a burst larger than one batch drains in one round).
 * Returns how many events were dispatched.
 */
export async function drainOutbox(deps: DeliveryDeps): Promise<number> {
  let total = 0;
  let dispatched: number;
  do {
    dispatched = await dispatchPendingEvents(deps);
    total += dispatched;
  } while (dispatched === BATCH);
  return total;
}
