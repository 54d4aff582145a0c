import { index, integer, jsonb, pgTable, text } from 'drizzle-orm/pg-core';
import { chatMessages, chats, chatTurns } from './chats.js';
import { id, tstz } from './columns.js';
import { apiKeys, organizations } from './core.js';

/**
 * `pending` until decided; `approved` or `denied` by the chat's key; `expired` when nobody decided
 * within APPROVAL_TIMEOUT_MS; `cancelled` when the turn stopped while it waited (cancel, shutdown).
 */
export type ToolApprovalStatus = 'pending' | 'approved' | 'denied' | 'expired' | 'cancelled';

/**
 * A tool call of a chat turn waiting for a person's decision (agents' `tools_requiring_approval`).
 * Kept in the database so any process may decide it; the process running the turn waits on it.
 */
export const toolApprovals = pgTable(
  'tool_approvals',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id),
    turnId: integer('turn_id')
      .notNull()
      .references(() => chatTurns.id),
    /** The assistant message (the reply) whose tool call this is. */
    messageId: integer('message_id')
      .notNull()
      .references(() => chatMessages.id),
    toolCallId: text('tool_call_id').notNull(),
    toolName: text('tool_name').notNull(),
    parameters: jsonb('parameters').$type<Record<string, unknown>>().notNull().default({}),
    status: text('status', { enum: ['pending', 'approved', 'denied', 'expired', 'cancelled'] })
      .$type<ToolApprovalStatus>()
      .notNull(),
    /** The reason the deciding key gave, if any. */
    reason: text('reason'),
    expiresAt: tstz('expires_at').notNull(),
    /** The key that decided (always the chat's own key). */
    decidedByApiKeyId: integer('decided_by_api_key_id').references(() => apiKeys.id),
    decidedAt: tstz('decided_at'),
    createdAt: tstz('created_at').notNull().defaultNow(),
  },
  (t) => [
    // Not unique: a model may reuse a call id; the newest call is the one decided.
    index('tool_approvals_turn_idx').on(t.turnId, t.status),
    index('tool_approvals_chat_call_idx').on(t.chatId, t.toolCallId),
  ],
);
export type ToolApprovalRow = typeof toolApprovals.$inferSelect;
