import { index, integer, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { id, timestamps, tstz } from './columns.js';
import { apiKeys } from './core.js';

/** A POST's first response, kept 24 hours per key and `Idempotency-Key` and replayed to repeats. */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    id: id(),
    apiKeyId: integer('api_key_id')
      .notNull()
      .references(() => apiKeys.id, { onDelete: 'cascade' }),
    key: text('key').notNull(),
    requestHash: text('request_hash').notNull(),
    state: text('state', { enum: ['running', 'completed'] }).notNull(),
    statusCode: integer('status_code'),
    contentType: text('content_type'),
    responseBody: text('response_body'),
    /** A streaming request's stream, so a repeat reattaches to it (e.g. `chat:12`). */
    streamRef: text('stream_ref'),
    /** A running request whose process died is taken over after this. */
    lockedUntil: tstz('locked_until').notNull(),
    createdAt: timestamps.createdAt,
  },
  (t) => [
    uniqueIndex('idempotency_keys_key_unique').on(t.apiKeyId, t.key),
    index('idempotency_keys_created_idx').on(t.createdAt),
  ],
);
