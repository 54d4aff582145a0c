import { and, count, eq, exists, isNull, like, or, type SQL, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import { agentSkills, type SkillRow, skillArtifactTypes, skills } from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { requireAdmin } from '../../policies/roles.js';
import { checkArtifactTypeIds } from '../artifact-types/references.js';
import { findArtifactTypeBySlug } from '../artifact-types/service.js';
import { linkedIds, replaceLinks } from '../link-tables.js';
import { firstFreeSlug, retryOnSlugClash, slugOf, suffixedPattern } from '../slugs.js';
import { normaliseVariables, variableProblems } from './placeholders.js';
import type { CreateSkillBody, UpdateSkillBody } from './schemas.js';

const live = (organizationId: number): SQL =>
  and(eq(skills.organizationId, organizationId), isNull(skills.deletedAt))!;

/** Linked artifact types (deleting a type removes its links). */
async function artifactTypeIdsOf(db: Queryable, skillIds: number[]) {
  return linkedIds(
    db,
    skillArtifactTypes,
    skillArtifactTypes.skillId,
    skillArtifactTypes.artifactTypeId,
    skillIds,
  );
}

async function withTypes(db: Queryable, rows: SkillRow[]) {
  const types = await artifactTypeIdsOf(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((row) => ({ row, artifactTypeIds: types.get(row.id)! }));
}

async function page(db: Queryable, where: SQL, query: PageQuery) {
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(skills).where(where).orderBy(skills.id).limit(query.page_size).offset(offsetOf(query)),
    db.select({ total: count() }).from(skills).where(where),
  ]);
  return { rows: await withTypes(db, rows), total };
}

export function listSkills(ctx: ServiceContext, query: PageQuery) {
  return page(ctx.db, live(ctx.principal.organizationId), query);
}

/** Spec 4.2: the skills of one artifact type, addressed by its slug. */
export async function listSkillsOfArtifactType(ctx: ServiceContext, slug: string, query: PageQuery) {
  const type = await findArtifactTypeBySlug(ctx.db, ctx.principal.organizationId, slug);
  if (!type) throw notFound('Artifact type');
  const ofType = exists(
    sql`(select 1 from ${skillArtifactTypes} where ${skillArtifactTypes.skillId} = ${skills.id}
        and ${skillArtifactTypes.artifactTypeId} = ${type.id})`,
  );
  return page(ctx.db, and(live(ctx.principal.organizationId), ofType)!, query);
}

async function findSkill(db: Queryable, ctx: ServiceContext, id: number): Promise<SkillRow> {
  const [row] = await db
    .select()
    .from(skills)
    .where(and(live(ctx.principal.organizationId), eq(skills.id, id)));
  if (!row) throw notFound('Skill');
  return row;
}

export async function getSkill(ctx: ServiceContext, id: number) {
  const [skill] = await withTypes(ctx.db, [await findSkill(ctx.db, ctx, id)]);
  return skill;
}

/** A live skill by its slash command's slug (`/weekly-report` -> `weekly-report`), or null. */
export async function findSkillBySlug(db: Queryable, organizationId: number, slug: string) {
  const [row] = await db
    .select()
    .from(skills)
    .where(and(live(organizationId), eq(skills.slug, slug)));
  return row ?? null;
}

function checkVariables(content: string, variables: ReturnType<typeof normaliseVariables>) {
  const details = variableProblems(content, variables);
  if (Object.keys(details).length > 0) {
    throw unprocessable(`Invalid skill: ${Object.values(details).flat().join('; ')}`, details);
  }
}

const typeLinks = (skillId: number, ids: number[]) =>
  ids.map((artifactTypeId) => ({ skillId, artifactTypeId }));

/** The slash command is `/` + the slug of the name, unique per organization (`-2`, `-3`...). */
export async function createSkill(ctx: ServiceContext, body: CreateSkillBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  const variables = normaliseVariables(body.custom_variables ?? []);
  checkVariables(body.content, variables);
  const typeIds = await checkArtifactTypeIds(ctx.db, orgId, body.artifact_type_ids);
  const base = slugOf(body.name, 'skill');
  const row = await retryOnSlugClash(() =>
    ctx.db.transaction(async (tx) => {
      const taken = await tx
        .select({ slug: skills.slug })
        .from(skills)
        .where(and(live(orgId), or(eq(skills.slug, base), like(skills.slug, suffixedPattern(base)))));
      const [created] = await tx
        .insert(skills)
        .values({
          organizationId: orgId,
          name: body.name,
          slug: firstFreeSlug(
            base,
            taken.map((t) => t.slug),
          ),
          description: body.description ?? '',
          content: body.content,
          customVariables: variables,
        })
        .returning();
      await tx.insert(skillArtifactTypes).values(typeLinks(created.id, typeIds));
      await recordAudit(tx, ctx, {
        action: 'skill.created',
        resource: { type: 'skill', id: created.id },
        changedFields: fieldsOf(body),
      });
      return created;
    }),
  );
  return { row, artifactTypeIds: typeIds };
}

/** Content and variables are checked together, whichever of them changes. The slash command stays. */
export async function updateSkill(ctx: ServiceContext, id: number, body: UpdateSkillBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  const current = await findSkill(ctx.db, ctx, id);
  const variables =
    body.custom_variables === undefined ? current.customVariables : normaliseVariables(body.custom_variables);
  checkVariables(body.content ?? current.content, variables);
  const typeIds =
    body.artifact_type_ids === undefined
      ? undefined
      : await checkArtifactTypeIds(ctx.db, orgId, body.artifact_type_ids);
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(skills)
      .set({
        name: body.name,
        content: body.content,
        description: body.description,
        customVariables: body.custom_variables === undefined ? undefined : variables,
        updatedAt: sql`now()`,
      })
      .where(and(live(orgId), eq(skills.id, id)))
      .returning();
    if (!row) throw notFound('Skill');
    if (typeIds)
      await replaceLinks(tx, skillArtifactTypes, skillArtifactTypes.skillId, id, typeLinks(id, typeIds));
    await recordAudit(tx, ctx, {
      action: 'skill.updated',
      resource: { type: 'skill', id },
      changedFields: fieldsOf(body),
    });
    const [skill] = await withTypes(tx, [row]);
    return skill;
  });
}

/** Soft delete: artifacts keep their reference; agents stop offering the skill. */
export async function deleteSkill(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(skills)
      .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
      .where(and(live(ctx.principal.organizationId), eq(skills.id, id)))
      .returning({ id: skills.id });
    if (!row) throw notFound('Skill');
    await tx.delete(agentSkills).where(eq(agentSkills.skillId, id));
    await recordAudit(tx, ctx, { action: 'skill.deleted', resource: { type: 'skill', id } });
  });
}
