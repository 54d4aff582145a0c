import { sql } from 'drizzle-orm';
import { index, integer, jsonb, numeric, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { id, timestamps, tstz } from './columns.js';
import { apiKeys, modelConfigurations, organizations, projects, users } from './core.js';
import { bytea, documents } from './documents.js';
import { agents } from './management.js';

/**
 * An API chat (spec 4.1). It belongs to the key that created it: no other key sees it. Archiving
 * hides it from every chat endpoint while keeping the data for billing and audit.
 */
export const chats = pgTable(
  'chats',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    apiKeyId: integer('api_key_id')
      .notNull()
      .references(() => apiKeys.id),
    /** The user of a personal key (whose activity the chat is); null for organization keys. */
    userId: integer('user_id').references(() => users.id),
    projectId: integer('project_id')
      .notNull()
      .references(() => projects.id),
    agentId: integer('agent_id').references(() => agents.id),
    /** Pinned at creation: every turn of the chat uses this model. */
    modelConfigurationId: integer('model_configuration_id')
      .notNull()
      .references(() => modelConfigurations.id),
    /** Null until the first user message names the chat; shown as `New chat` meanwhile. */
    title: text('title'),
    archivedAt: tstz('archived_at'),
    ...timestamps,
  },
  (t) => [
    index('chats_key_created_idx').on(t.apiKeyId, t.createdAt),
    index('chats_org_project_idx').on(t.organizationId, t.projectId),
  ],
);
export type ChatRow = typeof chats.$inferSelect;

export interface MessageCitation {
  marker: number;
  document_id: number;
  document_name: string;
  chunk_id: number | null;
  quote: string;
}

export type ChatMessageStatus = 'generating' | 'completed' | 'failed' | 'cancelled';

/**
 * User and assistant messages. Only `completed` messages are history (API, model context, counts);
 * a failed turn's messages stay for audit but never reach a client or the model again.
 */
export const chatMessages = pgTable(
  'chat_messages',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id),
    role: text('role', { enum: ['user', 'assistant'] }).notNull(),
    content: text('content').notNull().default(''),
    /** What the model saw instead of `content`, when a slash command expanded it into a skill's prompt. */
    prompt: text('prompt'),
    /** The model name for assistant messages; null for user messages. */
    model: text('model'),
    status: text('status', { enum: ['generating', 'completed', 'failed', 'cancelled'] })
      .$type<ChatMessageStatus>()
      .notNull(),
    /** Why a reply failed (assistant messages only). */
    error: text('error'),
    modelConfigurationId: integer('model_configuration_id').references(() => modelConfigurations.id),
    inputTokens: integer('input_tokens').notNull().default(0),
    outputTokens: integer('output_tokens').notNull().default(0),
    credits: numeric('credits', { precision: 20, scale: 6, mode: 'number' }).notNull().default(0),
    completedAt: tstz('completed_at'),
    createdAt: timestamps.createdAt,
    /** With `response_format`: the reply's JSON value (its content is the JSON text). */
    parsed: jsonb('parsed').$type<unknown>(),
    /** Assistant messages: the `[n]` markers of the reply and the passages they cite (issue 18). */
    citations: jsonb('citations').$type<MessageCitation[]>().notNull().default([]),
    /** A regenerated reply: the reply it replaces once it completes. */
    regeneratesId: integer('regenerates_id'),
    /** A reply replaced by regeneration: the reply now in its place (every older version points at it). */
    replacedById: integer('replaced_by_id'),
  },
  (t) => [index('chat_messages_chat_idx').on(t.chatId, t.id)],
);
export type MessageRow = typeof chatMessages.$inferSelect;

/** `denied`: the call needed an approval that was refused or not given in time; the tool did not run. */
export type ToolExecutionStatus = 'completed' | 'failed' | 'denied';

/** Every tool call the assistant made in a reply, stored as it finished (DESIGN.md 4). */
export const toolExecutions = pgTable(
  'tool_executions',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    messageId: integer('message_id')
      .notNull()
      .references(() => chatMessages.id),
    toolName: text('tool_name').notNull(),
    toolCallId: text('tool_call_id').notNull(),
    status: text('status', { enum: ['completed', 'failed', 'denied'] })
      .$type<ToolExecutionStatus>()
      .notNull(),
    parameters: jsonb('parameters').$type<Record<string, unknown>>().notNull().default({}),
    result: jsonb('result').$type<unknown>(),
    /** `{message}` when the tool threw; the model received the same text as an error result. */
    error: jsonb('error').$type<{ message: string } | null>(),
    executionTimeMs: integer('execution_time_ms').notNull().default(0),
    createdAt: timestamps.createdAt,
  },
  (t) => [index('tool_executions_message_idx').on(t.messageId, t.id)],
);
export type ToolExecutionRow = typeof toolExecutions.$inferSelect;

export type ChatTurnStatus = 'running' | 'completed' | 'failed' | 'cancelled' | 'expired';

/**
 * One row per turn (a user message and its reply). A `running` row is the chat's turn lease: the
 * partial unique index allows one per chat across every process, and `lease_expires_at` (renewed
 * while the turn runs) lets the next turn take over from a process that died.
 */
export const chatTurns = pgTable(
  'chat_turns',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id),
    status: text('status', { enum: ['running', 'completed', 'failed', 'cancelled', 'expired'] })
      .$type<ChatTurnStatus>()
      .notNull(),
    userMessageId: integer('user_message_id').references(() => chatMessages.id),
    assistantMessageId: integer('assistant_message_id').references(() => chatMessages.id),
    leaseExpiresAt: tstz('lease_expires_at').notNull(),
    /** Set by POST /api/v2/chats/:id/cancel; the process running the turn stops it and keeps the partial reply. */
    cancelRequestedAt: tstz('cancel_requested_at'),
    finishedAt: tstz('finished_at'),
    createdAt: timestamps.createdAt,
  },
  (t) => [
    uniqueIndex('chat_turns_one_running_per_chat').on(t.chatId).where(sql`${t.status} = 'running'`),
    index('chat_turns_chat_idx').on(t.chatId, t.id),
  ],
);
export type ChatTurnRow = typeof chatTurns.$inferSelect;

export type ChatAttachmentType = 'document' | 'image';

/**
 * What a user message was sent with (issue 18): a knowledge-base document (its text goes to the
 * model), or an image stored here once (sent to the model as an image part, served back only by
 * GET /chats/:id/attachments/:id).
 */
export const chatAttachments = pgTable(
  'chat_attachments',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    chatId: integer('chat_id')
      .notNull()
      .references(() => chats.id),
    messageId: integer('message_id')
      .notNull()
      .references(() => chatMessages.id),
    /** Order within the message. */
    position: integer('position').notNull(),
    type: text('type', { enum: ['document', 'image'] })
      .$type<ChatAttachmentType>()
      .notNull(),
    documentId: integer('document_id').references(() => documents.id, { onDelete: 'set null' }),
    name: text('name'),
    mediaType: text('media_type').notNull(),
    sizeBytes: integer('size_bytes').notNull(),
    /** Images only: the decoded bytes. */
    data: bytea('data'),
    createdAt: timestamps.createdAt,
  },
  (t) => [index('chat_attachments_message_idx').on(t.messageId, t.position)],
);
export type ChatAttachmentRow = typeof chatAttachments.$inferSelect;
