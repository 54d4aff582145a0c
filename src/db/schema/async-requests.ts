import { index, integer, jsonb, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import type { Principal } from '../../core/principal.js';
import { artifacts } from './artifacts.js';
import { timestamps } from './columns.js';
import { organizations, projects } from './core.js';

export type AsyncRequestStatus = 'accepted' | 'generated' | 'refined' | 'failed';
export type AsyncRequestKind = 'generate' | 'refine';

/** Who asked: the background job acts with the same rights as the request that was accepted. */
export type AsyncPrincipal = Pick<Principal, 'kind' | 'keyId' | 'userId' | 'role'>;

/**
 * A fire-and-forget generation or refinement (spec 3). Written in the transaction that enqueues
 * its job, so an accepted request is never lost; the job moves it to generated, refined or failed
 * in the transaction that records the matching webhook event.
 */
export const asyncRequests = pgTable(
  'async_requests',
  {
    /** The `api_async_create_event_id` returned to the client and carried by the webhook. */
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    projectId: integer('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    kind: text('kind').$type<AsyncRequestKind>().notNull(),
    artifactTypeSlug: text('artifact_type_slug').notNull(),
    /** Refinements: the artifact from the start; generations: once it exists. */
    artifactId: integer('artifact_id').references(() => artifacts.id, { onDelete: 'set null' }),
    status: text('status').$type<AsyncRequestStatus>().notNull().default('accepted'),
    error: text('error'),
    /** The validated request (service input), replayed by the job. */
    input: jsonb('input').$type<Record<string, unknown>>().notNull(),
    principal: jsonb('principal').$type<AsyncPrincipal>().notNull(),
    ...timestamps,
  },
  (t) => [index('async_requests_org_idx').on(t.organizationId)],
);
export type AsyncRequestRow = typeof asyncRequests.$inferSelect;
