import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { groups } from '../../db/schema/index.js';
import { unprocessable } from '../../http/errors.js';

/** Ids of `table` that the organization lacks, checked once per request: 422 naming the field. */
export function unknownIdsError(field: string, what: string, missing: number[]) {
  return unprocessable(`Unknown ${what}: ${missing.join(', ')}`, {
    [field]: [
      `${missing.length === 1 ? 'does' : 'do'} not exist in this organization: ${missing.join(', ')}`,
    ],
  });
}

/** The given group ids, deduplicated; 422 for ids that are not groups of the organization. */
export async function checkGroupIds(
  db: Queryable,
  organizationId: number,
  ids: number[],
  field = 'group_ids',
): Promise<number[]> {
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return wanted;
  const found = await db
    .select({ id: groups.id })
    .from(groups)
    .where(and(eq(groups.organizationId, organizationId), inArray(groups.id, wanted)));
  const known = new Set(found.map((g) => g.id));
  const missing = wanted.filter((id) => !known.has(id));
  if (missing.length > 0) throw unknownIdsError(field, 'groups', missing);
  return wanted.sort((a, b) => a - b);
}

export async function defaultGroupId(db: Queryable, organizationId: number): Promise<number> {
  const [row] = await db
    .select({ id: groups.id })
    .from(groups)
    .where(and(eq(groups.organizationId, organizationId), eq(groups.isDefault, true)));
  if (!row) throw new Error(`Organization ${organizationId} has no default group`);
  return row.id;
}

export interface GroupAssignment {
  group_ids?: number[];
  use_default_group?: boolean;
}

/**
 * The groups a project or category gets (spec 2: `group_ids`, at least one, or `use_default_group`).
 * Both together add the default group to the given ones. Nothing at all is a 422.
 */
export async function resolveGroupAssignment(
  db: Queryable,
  organizationId: number,
  input: GroupAssignment,
): Promise<number[]> {
  const ids = await checkGroupIds(db, organizationId, input.group_ids ?? []);
  if (input.use_default_group === true) {
    const fallback = await defaultGroupId(db, organizationId);
    if (!ids.includes(fallback)) ids.push(fallback);
  }
  if (ids.length === 0) {
    throw unprocessable('At least one group is required: give group_ids or use_default_group: true', {
      group_ids: ['must contain at least one group unless use_default_group is true'],
    });
  }
  return ids.sort((a, b) => a - b);
}

/** True when the input asks to change group assignments (PUT). */
export const changesGroups = (input: GroupAssignment) =>
  input.group_ids !== undefined || input.use_default_group === true;

/**
 * Serialises changes to "which groups does X have" within an organization, so a group deletion
 * and a concurrent reassignment cannot together leave a category or project without a group.
 */
export async function lockGroupAssignments(tx: Queryable, organizationId: number): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(7265619, ${organizationId})`);
}
