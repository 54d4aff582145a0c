import { sql } from 'drizzle-orm';
import {
  type AnyPgColumn,
  boolean,
  index,
  integer,
  numeric,
  pgTable,
  primaryKey,
  text,
  uniqueIndex,
} from 'drizzle-orm/pg-core';
import { id, timestamps, tstz } from './columns.js';

export const organizations = pgTable('organizations', {
  id: id(),
  name: text('name').notNull(),
  active: boolean('active').notNull().default(true),
  creditBalance: numeric('credit_balance', { precision: 20, scale: 6, mode: 'number' }).notNull().default(0),
  defaultModelConfigurationId: integer('default_model_configuration_id').references(
    (): AnyPgColumn => modelConfigurations.id,
    { onDelete: 'set null' },
  ),
  deactivatedAt: tstz('deactivated_at'),
  ...timestamps,
});
export type OrganizationRow = typeof organizations.$inferSelect;

export const users = pgTable(
  'users',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    email: text('email').notNull(),
    name: text('name').notNull().default(''),
    role: text('role', { enum: ['admin', 'member'] }).notNull(),
    deletedAt: tstz('deleted_at'),
    ...timestamps,
  },
  (t) => [
    uniqueIndex('users_org_email_unique')
      .on(t.organizationId, sql`lower(${t.email})`)
      .where(sql`${t.deletedAt} is null`),
  ],
);
export type UserRow = typeof users.$inferSelect;

export const groups = pgTable(
  'groups',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    isDefault: boolean('is_default').notNull().default(false),
    ...timestamps,
  },
  (t) => [
    uniqueIndex('groups_one_default_per_org').on(t.organizationId).where(sql`${t.isDefault}`),
    index('groups_org_idx').on(t.organizationId),
  ],
);
export type GroupRow = typeof groups.$inferSelect;

export const groupMembers = pgTable(
  'group_members',
  {
    groupId: integer('group_id')
      .notNull()
      .references(() => groups.id, { onDelete: 'cascade' }),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    createdAt: timestamps.createdAt,
  },
  (t) => [primaryKey({ columns: [t.groupId, t.userId] }), index('group_members_user_idx').on(t.userId)],
);

export const apiKeys = pgTable(
  'api_keys',
  {
    id: id(),
    organizationId: integer('organization_id').references(() => organizations.id),
    userId: integer('user_id').references(() => users.id),
    kind: text('kind', { enum: ['organization', 'personal', 'super_admin'] }).notNull(),
    name: text('name').notNull().default(''),
    prefix: text('prefix').notNull(),
    keyHash: text('key_hash').notNull().unique(),
    revokedAt: tstz('revoked_at'),
    lastUsedAt: tstz('last_used_at'),
    createdAt: timestamps.createdAt,
  },
  (t) => [index('api_keys_org_idx').on(t.organizationId)],
);
export type ApiKeyRow = typeof apiKeys.$inferSelect;

export const modelConfigurations = pgTable(
  'model_configurations',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    provider: text('provider', { enum: ['openai-compatible', 'openai', 'anthropic', 'builtin'] }).notNull(),
    model: text('model').notNull(),
    baseUrl: text('base_url'),
    /** AES-256-GCM ciphertext (src/crypto/secrets.ts); never returned by the API. */
    apiKeyEncrypted: text('api_key_encrypted'),
    purpose: text('purpose', { enum: ['chat', 'embedding'] })
      .notNull()
      .default('chat'),
    creditsPer1kInputTokens: numeric('credits_per_1k_input_tokens', {
      precision: 20,
      scale: 6,
      mode: 'number',
    })
      .notNull()
      .default(0),
    creditsPer1kOutputTokens: numeric('credits_per_1k_output_tokens', {
      precision: 20,
      scale: 6,
      mode: 'number',
    })
      .notNull()
      .default(0),
    deletedAt: tstz('deleted_at'),
    ...timestamps,
  },
  (t) => [index('model_configurations_org_idx').on(t.organizationId)],
);
export type ModelConfigurationRow = typeof modelConfigurations.$inferSelect;

export const projects = pgTable(
  'projects',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    overview: text('overview').notNull().default(''),
    archivedAt: tstz('archived_at'),
    deletedAt: tstz('deleted_at'),
    ...timestamps,
  },
  (t) => [index('projects_org_idx').on(t.organizationId)],
);
export type ProjectRow = typeof projects.$inferSelect;

export const projectGroups = pgTable(
  'project_groups',
  {
    projectId: integer('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    groupId: integer('group_id')
      .notNull()
      .references(() => groups.id, { onDelete: 'cascade' }),
  },
  (t) => [primaryKey({ columns: [t.projectId, t.groupId] }), index('project_groups_group_idx').on(t.groupId)],
);

/** Every change of an organization's balance: grants (positive) and usage charges (negative). */
export const creditLedger = pgTable(
  'credit_ledger',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    kind: text('kind', { enum: ['grant', 'usage'] }).notNull(),
    amount: numeric('amount', { precision: 20, scale: 6, mode: 'number' }).notNull(),
    projectId: integer('project_id').references(() => projects.id),
    apiKeyId: integer('api_key_id').references(() => apiKeys.id),
    modelConfigurationId: integer('model_configuration_id').references(() => modelConfigurations.id),
    inputTokens: integer('input_tokens').notNull().default(0),
    outputTokens: integer('output_tokens').notNull().default(0),
    /** What was charged: e.g. `message:42`, `artifact:7`. */
    reference: text('reference'),
    createdAt: timestamps.createdAt,
  },
  (t) => [index('credit_ledger_org_created_idx').on(t.organizationId, t.createdAt)],
);
