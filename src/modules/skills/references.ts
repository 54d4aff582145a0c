import { and, eq, inArray, isNull } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { skills } from '../../db/schema/index.js';
import { unknownIdsError } from '../groups/references.js';

/** The given skill ids, deduplicated and sorted; 422 for ids the organization lacks (or deleted). */
export async function checkSkillIds(
  db: Queryable,
  organizationId: number,
  ids: number[],
  field = 'skill_ids',
): Promise<number[]> {
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return wanted;
  const found = await db
    .select({ id: skills.id })
    .from(skills)
    .where(
      and(eq(skills.organizationId, organizationId), isNull(skills.deletedAt), inArray(skills.id, wanted)),
    );
  const known = new Set(found.map((r) => r.id));
  const missing = wanted.filter((id) => !known.has(id));
  if (missing.length > 0) throw unknownIdsError(field, 'skills', missing);
  return wanted.sort((a, b) => a - b);
}
