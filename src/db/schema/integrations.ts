import { boolean, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { id, timestamps } from './columns.js';
import { organizations, projects } from './core.js';

/** A connected tool server (MCP) of an organization. */
export const integrations = pgTable(
  'integrations',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    /** From the name on creation, never changed by renames: the prefix of the tool names the model sees. */
    slug: text('slug').notNull(),
    url: text('url').notNull(),
    /** JSON object of request headers, encrypted with the secret box; write-only in the API. */
    headersEncrypted: text('headers_encrypted'),
    /** The header names alone, so responses can show which are set without decrypting. */
    headerNames: jsonb('header_names').$type<string[]>().notNull().default([]),
    /**
     * True: every project of the organization, now and later. Kept apart from the project list so
     * that deleting the only listed project never widens the integration to every project.
     */
    allProjects: boolean('all_projects').notNull().default(true),
    enabled: boolean('enabled').notNull().default(true),
    ...timestamps,
  },
  (t) => [
    uniqueIndex('integrations_org_slug_unique').on(t.organizationId, t.slug),
    index('integrations_org_idx').on(t.organizationId),
  ],
);

export const integrationProjects = pgTable(
  'integration_projects',
  {
    integrationId: integer('integration_id')
      .notNull()
      .references(() => integrations.id, { onDelete: 'cascade' }),
    projectId: integer('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
  },
  (t) => [
    primaryKey({ columns: [t.integrationId, t.projectId] }),
    index('integration_projects_project_idx').on(t.projectId),
  ],
);

export type IntegrationRow = typeof integrations.$inferSelect;
