import { sql } from 'drizzle-orm';
import { index, integer, jsonb, pgTable, text } from 'drizzle-orm/pg-core';
import type { AsyncPrincipal } from './async-requests.js';
import { chats, chatTurns } from './chats.js';
import { tstz } from './columns.js';
import { organizations } from './core.js';

/**
 * `queued`: waiting for the chat; `started`: its turn began (`turn_id`); `removed`: DELETE
 * /queue/:id; `dropped`: the chat was archived; `failed`: refused when its turn was to start (402...).
 */
export type QueuedMessageStatus = 'queued' | 'started' | 'removed' | 'dropped' | 'failed';

/**
 * A message sent with `if_busy: "enqueue"` (or `"interrupt"`) while the chat's turn ran (issue 17):
 * stored here, not in history, until its turn starts on whichever process finds the chat free.
 * `priority` 1 (an interrupt) runs ahead of the waiting ones; otherwise arrival order (`id`).
 */
export const chatQueuedMessages = pgTable(
  'chat_queued_messages',
  {
    id: integer('id').primaryKey().generatedAlwaysAsIdentity(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id),
    content: text('content').notNull(),
    priority: integer('priority').notNull().default(0),
    /** The key that sent it: its turn runs with the same rights (every check runs again then). */
    principal: jsonb('principal').$type<AsyncPrincipal>().notNull(),
    status: text('status').$type<QueuedMessageStatus>().notNull().default('queued'),
    turnId: integer('turn_id').references(() => chatTurns.id),
    /** Why its turn could not start (`failed`): the answer the waiting client gets. */
    error: jsonb('error').$type<{ status: number; code: string; message: string }>(),
    createdAt: tstz('created_at').notNull().defaultNow(),
    startedAt: tstz('started_at'),
  },
  (t) => [
    index('chat_queued_messages_waiting_idx')
      .on(t.chatId, t.priority, t.id)
      .where(sql`${t.status} = 'queued'`),
  ],
);
export type QueuedMessageRow = typeof chatQueuedMessages.$inferSelect;
