import { and, eq, inArray, isNull } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { artifactTypes } from '../../db/schema/index.js';
import { unknownIdsError } from '../groups/references.js';

/** The given artifact type ids, deduplicated and sorted; 422 for ids the organization lacks (or deleted). */
export async function checkArtifactTypeIds(
  db: Queryable,
  organizationId: number,
  ids: number[],
  field = 'artifact_type_ids',
): Promise<number[]> {
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return wanted;
  const found = await db
    .select({ id: artifactTypes.id })
    .from(artifactTypes)
    .where(
      and(
        eq(artifactTypes.organizationId, organizationId),
        isNull(artifactTypes.deletedAt),
        inArray(artifactTypes.id, wanted),
      ),
    );
  const known = new Set(found.map((r) => r.id));
  const missing = wanted.filter((id) => !known.has(id));
  if (missing.length > 0) throw unknownIdsError(field, 'artifact types', missing);
  return wanted.sort((a, b) => a - b);
}
