import { boolean, index, integer, jsonb, numeric, pgTable, text } from 'drizzle-orm/pg-core';
import { id, timestamps } from './columns.js';
import { apiKeys, modelConfigurations, organizations, projects, users } from './core.js';
import { artifactTypes, skills } from './management.js';

/** One entry of an artifact's conversation with the model (spec 2: `chat_history`). */
export interface ChatHistoryEntry {
  role: 'user' | 'assistant' | 'tool';
  content: string;
  /** Tool entries only: which tool ran during generation, with what, and how it ended. */
  tool_name?: string;
  tool_call_id?: string;
  parameters?: unknown;
  error?: string | null;
}

/**
 * A generated document. Rows are written only once a generation has finished, so a half-written
 * stream never exists as an artifact; refinements replace `content` in the transaction that
 * appends the exchange to `chat_history`.
 */
export const artifacts = pgTable(
  'artifacts',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    projectId: integer('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    artifactTypeId: integer('artifact_type_id')
      .notNull()
      .references(() => artifactTypes.id, { onDelete: 'cascade' }),
    skillId: integer('skill_id').references(() => skills.id, { onDelete: 'set null' }),
    /** The chat whose assistant made it (the artifacts tool); no foreign key: chats live in their own module. */
    chatId: integer('chat_id'),
    modelConfigurationId: integer('model_configuration_id').references(() => modelConfigurations.id, {
      onDelete: 'set null',
    }),
    apiKeyId: integer('api_key_id').references(() => apiKeys.id),
    userId: integer('user_id').references(() => users.id),
    name: text('name').notNull(),
    content: text('content').notNull(),
    manuallyEdited: boolean('manually_edited').notNull().default(false),
    notes: text('notes'),
    /** 192 random bits, base64url: the only secret guarding the public share page. */
    shareToken: text('share_token').notNull().unique(),
    chatHistory: jsonb('chat_history').$type<ChatHistoryEntry[]>().notNull().default([]),
    /** Generated with `response_format`: the content's JSON value. */
    parsed: jsonb('parsed').$type<unknown>(),
    /** Totals over the generation and every refinement. */
    inputTokens: integer('input_tokens').notNull().default(0),
    outputTokens: integer('output_tokens').notNull().default(0),
    credits: numeric('credits', { precision: 20, scale: 6, mode: 'number' }).notNull().default(0),
    ...timestamps,
  },
  (t) => [
    index('artifacts_org_type_idx').on(t.organizationId, t.artifactTypeId),
    index('artifacts_project_idx').on(t.projectId),
  ],
);
export type ArtifactRow = typeof artifacts.$inferSelect;
