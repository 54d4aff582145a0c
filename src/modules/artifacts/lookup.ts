import { and, eq, isNull } from 'drizzle-orm';
import type { OrgPrincipal } from '../../core/principal.js';
import type { Queryable } from '../../db/client.js';
import {
  type ArtifactRow,
  type ArtifactTypeRow,
  artifacts,
  artifactTypes,
  type ProjectRow,
  projects,
  type SkillRow,
  skillArtifactTypes,
  skills,
} from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { findProjectFor, projectVisibleTo } from '../../policies/projects.js';

/** An artifact with the slug of its type, as every response shows it. */
export interface ArtifactRecord extends ArtifactRow {
  artifactTypeSlug: string;
}

interface Scope {
  db: Queryable;
  principal: OrgPrincipal;
}

export async function findArtifactType({ db, principal }: Scope, slug: string): Promise<ArtifactTypeRow> {
  const [row] = await db
    .select()
    .from(artifactTypes)
    .where(
      and(
        eq(artifactTypes.organizationId, principal.organizationId),
        eq(artifactTypes.slug, slug),
        isNull(artifactTypes.deletedAt),
      ),
    );
  if (!row) throw notFound('Artifact type');
  return row;
}

/**
 * The project a generation writes into. v1 never reveals projects a key cannot use: missing and
 * forbidden are both 404. An archived project takes no new work (422).
 */
export async function findWritableProject({ db, principal }: Scope, projectId: number): Promise<ProjectRow> {
  const found = await findProjectFor(db, principal, projectId);
  if (!found?.allowed) throw notFound('Project');
  if (found.project.archivedAt !== null) {
    throw unprocessable(
      'The project is archived and takes no new artifacts or refinements',
      { project_id: ['is archived'] },
      'project_archived',
    );
  }
  return found.project;
}

/** A skill of the organization that is linked to the artifact type; 404 otherwise. */
export async function findSkillOfType(
  { db, principal }: Scope,
  skillId: number,
  artifactTypeId: number,
): Promise<SkillRow> {
  const [row] = await db
    .select({ skill: skills })
    .from(skills)
    .innerJoin(
      skillArtifactTypes,
      and(eq(skillArtifactTypes.skillId, skills.id), eq(skillArtifactTypes.artifactTypeId, artifactTypeId)),
    )
    .where(
      and(
        eq(skills.id, skillId),
        eq(skills.organizationId, principal.organizationId),
        isNull(skills.deletedAt),
      ),
    );
  if (!row) throw notFound('Skill');
  return row.skill;
}

/**
 * An artifact the key may reach: in its organization, in a project it may use, and of the type the
 * path names (`slug` null: of any live type, for the chat tools that know only the id). 404 otherwise.
 */
export async function findArtifact(
  { db, principal }: Scope,
  artifactId: number,
  slug: string | null,
): Promise<ArtifactRecord> {
  const [row] = await db
    .select({ artifact: artifacts, slug: artifactTypes.slug })
    .from(artifacts)
    .innerJoin(artifactTypes, eq(artifactTypes.id, artifacts.artifactTypeId))
    .innerJoin(projects, eq(projects.id, artifacts.projectId))
    .where(
      and(
        eq(artifacts.id, artifactId),
        eq(artifacts.organizationId, principal.organizationId),
        isNull(artifactTypes.deletedAt),
        slug === null ? undefined : eq(artifactTypes.slug, slug),
        projectVisibleTo(principal),
      ),
    );
  if (!row) throw notFound('Artifact');
  return { ...row.artifact, artifactTypeSlug: row.slug };
}

export async function projectOf(db: Queryable, projectId: number): Promise<ProjectRow> {
  const [row] = await db.select().from(projects).where(eq(projects.id, projectId));
  if (!row) throw notFound('Project');
  return row;
}
