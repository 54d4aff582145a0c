import { and, eq, inArray } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { categories } from '../../db/schema/index.js';
import { unknownIdsError } from '../groups/references.js';

/** The given category ids, deduplicated and sorted; 422 for ids the organization lacks. */
export async function checkCategoryIds(
  db: Queryable,
  organizationId: number,
  ids: number[],
  field = 'category_ids',
): Promise<number[]> {
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return wanted;
  const found = await db
    .select({ id: categories.id })
    .from(categories)
    .where(and(eq(categories.organizationId, organizationId), inArray(categories.id, wanted)));
  const known = new Set(found.map((c) => c.id));
  const missing = wanted.filter((id) => !known.has(id));
  if (missing.length > 0) throw unknownIdsError(field, 'categories', missing);
  return wanted.sort((a, b) => a - b);
}
