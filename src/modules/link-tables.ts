import { eq, inArray } from 'drizzle-orm';
import type { PgColumn, PgTable } from 'drizzle-orm/pg-core';
import type { Queryable } from '../db/client.js';

/**
 * Reads a many-to-many table (`project_groups`, `agent_skills`...) for several owners at once:
 * owner id -> linked ids in ascending order. Every owner asked for is in the map.
 */
export async function linkedIds(
  db: Queryable,
  table: PgTable,
  owner: PgColumn,
  linked: PgColumn,
  ownerIds: number[],
): Promise<Map<number, number[]>> {
  const byOwner = new Map<number, number[]>(ownerIds.map((id) => [id, []]));
  if (ownerIds.length === 0) return byOwner;
  const rows = await db.select({ owner, linked }).from(table).where(inArray(owner, ownerIds)).orderBy(linked);
  for (const row of rows) byOwner.get(row.owner as number)?.push(row.linked as number);
  return byOwner;
}

/** Replaces an owner's links: the given ids become the whole set. Run it inside the owner's transaction. */
export async function replaceLinks<T extends PgTable>(
  tx: Queryable,
  table: T,
  owner: PgColumn,
  ownerId: number,
  rows: T['$inferInsert'][],
): Promise<void> {
  await tx.delete(table).where(eq(owner, ownerId));
  if (rows.length > 0) await tx.insert(table).values(rows);
}
