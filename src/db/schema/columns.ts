import { integer, timestamp } from 'drizzle-orm/pg-core';

/** Timestamps stay PostgreSQL strings (microseconds kept); src/http/timestamps.ts renders them. */
export const tstz = (name: string) => timestamp(name, { withTimezone: true, precision: 6, mode: 'string' });

export const id = () => integer('id').primaryKey().generatedAlwaysAsIdentity();

export const timestamps = {
  createdAt: tstz('created_at').notNull().defaultNow(),
  updatedAt: tstz('updated_at').notNull().defaultNow(),
};
