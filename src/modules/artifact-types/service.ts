import { and, count, eq, isNull, like, or, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import { type ArtifactTypeRow, artifactTypes, skillArtifactTypes } from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { requireAdmin } from '../../policies/roles.js';
import { checkCategoryIds } from '../categories/references.js';
import { firstFreeSlug, retryOnSlugClash, slugOf, suffixedPattern } from '../slugs.js';
import type { CreateArtifactTypeBody, UpdateArtifactTypeBody } from './schemas.js';

const live = (organizationId: number) =>
  and(eq(artifactTypes.organizationId, organizationId), isNull(artifactTypes.deletedAt))!;

/** A live artifact type of the organization by slug (the key of the artifact endpoints), or null. */
export async function findArtifactTypeBySlug(
  db: Queryable,
  organizationId: number,
  slug: string,
): Promise<ArtifactTypeRow | null> {
  const [row] = await db
    .select()
    .from(artifactTypes)
    .where(and(live(organizationId), eq(artifactTypes.slug, slug)));
  return row ?? null;
}

export async function listArtifactTypes(ctx: ServiceContext, page: PageQuery) {
  const where = live(ctx.principal.organizationId);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(artifactTypes)
      .where(where)
      .orderBy(artifactTypes.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(artifactTypes).where(where),
  ]);
  return { rows, total };
}

async function findArtifactType(db: Queryable, ctx: ServiceContext, id: number): Promise<ArtifactTypeRow> {
  const [row] = await db
    .select()
    .from(artifactTypes)
    .where(and(live(ctx.principal.organizationId), eq(artifactTypes.id, id)));
  if (!row) throw notFound('Artifact type');
  return row;
}

export const getArtifactType = (ctx: ServiceContext, id: number) => findArtifactType(ctx.db, ctx, id);

async function checkCategory(ctx: ServiceContext, categoryId: number | null | undefined) {
  if (categoryId !== undefined && categoryId !== null) {
    await checkCategoryIds(ctx.db, ctx.principal.organizationId, [categoryId], 'category_id');
  }
}

/** The slug comes from the name once, here; `-2`, `-3`... when the organization already has it. */
export async function createArtifactType(ctx: ServiceContext, body: CreateArtifactTypeBody) {
  requireAdmin(ctx.principal);
  await checkCategory(ctx, body.category_id);
  const orgId = ctx.principal.organizationId;
  const base = slugOf(body.name, 'artifact-type');
  return retryOnSlugClash(() =>
    ctx.db.transaction(async (tx) => {
      const taken = await tx
        .select({ slug: artifactTypes.slug })
        .from(artifactTypes)
        .where(
          and(live(orgId), or(eq(artifactTypes.slug, base), like(artifactTypes.slug, suffixedPattern(base)))),
        );
      const [row] = await tx
        .insert(artifactTypes)
        .values({
          organizationId: orgId,
          slug: firstFreeSlug(
            base,
            taken.map((t) => t.slug),
          ),
          name: body.name,
          description: body.description ?? '',
          categoryId: body.category_id ?? null,
        })
        .returning();
      await recordAudit(tx, ctx, {
        action: 'artifact_type.created',
        resource: { type: 'artifact_type', id: row.id },
        changedFields: fieldsOf(body),
      });
      return row;
    }),
  );
}

/** Renames keep the slug: clients address the type by it. */
export async function updateArtifactType(ctx: ServiceContext, id: number, body: UpdateArtifactTypeBody) {
  requireAdmin(ctx.principal);
  await findArtifactType(ctx.db, ctx, id);
  await checkCategory(ctx, body.category_id);
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(artifactTypes)
      .set({
        name: body.name,
        description: body.description,
        categoryId: body.category_id,
        updatedAt: sql`now()`,
      })
      .where(eq(artifactTypes.id, id))
      .returning();
    await recordAudit(tx, ctx, {
      action: 'artifact_type.updated',
      resource: { type: 'artifact_type', id },
      changedFields: fieldsOf(body),
    });
    return row;
  });
}

/** Soft delete: generated artifacts keep their type; skills stop offering it. */
export async function deleteArtifactType(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    await findArtifactType(tx, ctx, id);
    await tx
      .update(artifactTypes)
      .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
      .where(eq(artifactTypes.id, id));
    await tx.delete(skillArtifactTypes).where(eq(skillArtifactTypes.artifactTypeId, id));
    await recordAudit(tx, ctx, { action: 'artifact_type.deleted', resource: { type: 'artifact_type', id } });
  });
}
