import { index, integer, jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { timestamps, tstz } from './columns.js';

/**
 * One row per event stream (a chat turn `chat-turn:<id>`, an artifact stream `artifact-stream:<uuid>`):
 * how far it got, whether it ended, and until when its publishing process vouches for it, so a
 * reader in another process can tell a quiet stream from one whose process died.
 */
export const eventStreams = pgTable(
  'event_streams',
  {
    key: text('key').primaryKey(),
    /**
     * The highest `seq` stored in `stream_events` when the head was last written (the stream opened,
     * was kept alive, or ended: exact from then on); readers take the stored events' own highest too.
     */
    lastSeq: integer('last_seq').notNull().default(0),
    /** Renewed while the stream is open; a stream past it without `ended_at` was abandoned. */
    aliveUntil: tstz('alive_until').notNull(),
    /** Set with the stream's last event (`done` or `error`). */
    endedAt: tstz('ended_at'),
    createdAt: timestamps.createdAt,
  },
  (t) => [index('event_streams_ended_idx').on(t.endedAt), index('event_streams_alive_idx').on(t.aliveUntil)],
);

/** The events of every stream, numbered 1, 2, 3... per stream, written in batches by the publisher. */
export const streamEvents = pgTable(
  'stream_events',
  {
    streamKey: text('stream_key').notNull(),
    seq: integer('seq').notNull(),
    event: text('event').notNull(),
    data: jsonb('data').$type<unknown>().notNull(),
  },
  (t) => [primaryKey({ columns: [t.streamKey, t.seq] })],
);
