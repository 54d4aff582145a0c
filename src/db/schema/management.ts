import { sql } from 'drizzle-orm';
import { index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { id, timestamps, tstz } from './columns.js';
import { groups, modelConfigurations, organizations, projects } from './core.js';

export const categories = pgTable(
  'categories',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    ...timestamps,
  },
  (t) => [index('categories_org_idx').on(t.organizationId)],
);
export type CategoryRow = typeof categories.$inferSelect;

export const categoryGroups = pgTable(
  'category_groups',
  {
    categoryId: integer('category_id')
      .notNull()
      .references(() => categories.id, { onDelete: 'cascade' }),
    groupId: integer('group_id')
      .notNull()
      .references(() => groups.id, { onDelete: 'cascade' }),
  },
  (t) => [
    primaryKey({ columns: [t.categoryId, t.groupId] }),
    index('category_groups_group_idx').on(t.groupId),
  ],
);

export const projectCategories = pgTable(
  'project_categories',
  {
    projectId: integer('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    categoryId: integer('category_id')
      .notNull()
      .references(() => categories.id, { onDelete: 'cascade' }),
  },
  (t) => [primaryKey({ columns: [t.projectId, t.categoryId] })],
);

export const artifactTypes = pgTable(
  'artifact_types',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    /** Generated from the name on creation; never changed by renames. */
    slug: text('slug').notNull(),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    /** Kept for backwards compatibility (spec 9). */
    categoryId: integer('category_id').references(() => categories.id, { onDelete: 'set null' }),
    /** Soft delete: artifacts keep their type; the slug becomes free for a new type. */
    deletedAt: tstz('deleted_at'),
    ...timestamps,
  },
  (t) => [
    uniqueIndex('artifact_types_org_slug_unique')
      .on(t.organizationId, t.slug)
      .where(sql`${t.deletedAt} is null`),
  ],
);
export type ArtifactTypeRow = typeof artifactTypes.$inferSelect;

export interface CustomVariable {
  name: string;
  description: string;
  type: string;
}

export const skills = pgTable(
  'skills',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    /** Slug of the name; the slash command is `/` + slug. */
    slug: text('slug').notNull(),
    description: text('description').notNull().default(''),
    content: text('content').notNull(),
    customVariables: jsonb('custom_variables').$type<CustomVariable[]>().notNull().default([]),
    /** Soft delete: artifacts generated from the skill keep their reference. */
    deletedAt: tstz('deleted_at'),
    ...timestamps,
  },
  (t) => [
    uniqueIndex('skills_org_slug_unique').on(t.organizationId, t.slug).where(sql`${t.deletedAt} is null`),
  ],
);
export type SkillRow = typeof skills.$inferSelect;

export const skillArtifactTypes = pgTable(
  'skill_artifact_types',
  {
    skillId: integer('skill_id')
      .notNull()
      .references(() => skills.id, { onDelete: 'cascade' }),
    artifactTypeId: integer('artifact_type_id')
      .notNull()
      .references(() => artifactTypes.id, { onDelete: 'cascade' }),
  },
  (t) => [
    primaryKey({ columns: [t.skillId, t.artifactTypeId] }),
    index('skill_artifact_types_type_idx').on(t.artifactTypeId),
  ],
);

export type AgentTool = 'knowledge' | 'artifacts' | 'skills' | 'integrations';

export const agents = pgTable(
  'agents',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    instructions: text('instructions').notNull().default(''),
    modelConfigurationId: integer('model_configuration_id').references(() => modelConfigurations.id, {
      onDelete: 'set null',
    }),
    tools: jsonb('tools').$type<AgentTool[]>().notNull().default([]),
    /** Tool names whose calls wait for a decision (POST /api/v2/chats/:id/approvals/:tool_call_id); `["*"]`: every tool. */
    toolsRequiringApproval: jsonb('tools_requiring_approval').$type<string[]>().notNull().default([]),
    deletedAt: tstz('deleted_at'),
    ...timestamps,
  },
  (t) => [index('agents_org_idx').on(t.organizationId)],
);
export type AgentRow = typeof agents.$inferSelect;

export const agentSkills = pgTable(
  'agent_skills',
  {
    agentId: integer('agent_id')
      .notNull()
      .references(() => agents.id, { onDelete: 'cascade' }),
    skillId: integer('skill_id')
      .notNull()
      .references(() => skills.id, { onDelete: 'cascade' }),
  },
  (t) => [primaryKey({ columns: [t.agentId, t.skillId] })],
);

/** An agent with groups is usable only by members of one of them; without groups, by everyone. */
export const agentGroups = pgTable(
  'agent_groups',
  {
    agentId: integer('agent_id')
      .notNull()
      .references(() => agents.id, { onDelete: 'cascade' }),
    groupId: integer('group_id')
      .notNull()
      .references(() => groups.id, { onDelete: 'cascade' }),
  },
  (t) => [primaryKey({ columns: [t.agentId, t.groupId] })],
);

export type WebhookEventName =
  | 'artifact_generated'
  | 'artifact_refined'
  | 'artifact_generation_failed'
  | 'chat_turn_completed'
  | 'chat_turn_failed'
  | 'chat_approval_required'
  | 'document_processed'
  | 'document_failed';

/**
 * Webhooks of a project, and organization webhooks (`project_id` null: events of every project,
 * and the organization's own, such as documents).
 */
export const projectWebhooks = pgTable(
  'project_webhooks',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    projectId: integer('project_id').references(() => projects.id, { onDelete: 'cascade' }),
    url: text('url').notNull(),
    events: jsonb('events').$type<WebhookEventName[]>().notNull(),
    /** The `whsec_...` signing secret, encrypted with the secret box (it must be readable to sign). */
    secretEncrypted: text('secret_encrypted').notNull(),
    ...timestamps,
  },
  (t) => [index('project_webhooks_project_idx').on(t.projectId)],
);
export type ProjectWebhookRow = typeof projectWebhooks.$inferSelect;

/**
 * The outbox: one row per event, written in the same transaction as the change it reports, so
 * a crash cannot lose it. The delivery job fans it out to the project's subscribed webhooks.
 */
export const webhookEvents = pgTable(
  'webhook_events',
  {
    id: id(),
    /** The Standard Webhooks `webhook-id` base; stable across retries. */
    eventId: uuid('event_id').notNull().defaultRandom().unique(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    /** Null for an event of the organization itself (documents): only organization webhooks get it. */
    projectId: integer('project_id').references(() => projects.id, { onDelete: 'cascade' }),
    eventName: text('event_name').notNull(),
    eventData: jsonb('event_data').$type<Record<string, unknown>>().notNull(),
    dispatchedAt: tstz('dispatched_at'),
    createdAt: timestamps.createdAt,
  },
  (t) => [index('webhook_events_undispatched_idx').on(t.id).where(sql`${t.dispatchedAt} is null`)],
);
