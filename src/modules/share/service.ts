import { and, eq, isNull } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { artifacts, organizations, projects } from '../../db/schema/index.js';

export interface SharedArtifact {
  name: string;
  content: string;
  updatedAt: string;
}

const TOKEN = /^[A-Za-z0-9_-]{16,128}$/;

/**
 * The artifact behind a share token, or null. Only the name, content and date leave this function:
 * the page shows nothing else of the organization. Deleted artifacts, deleted projects and
 * deactivated organizations share nothing.
 */
export async function findSharedArtifact(db: Queryable, token: string): Promise<SharedArtifact | null> {
  if (!TOKEN.test(token)) return null;
  const [row] = await db
    .select({ name: artifacts.name, content: artifacts.content, updatedAt: artifacts.updatedAt })
    .from(artifacts)
    .innerJoin(projects, eq(projects.id, artifacts.projectId))
    .innerJoin(organizations, eq(organizations.id, artifacts.organizationId))
    .where(and(eq(artifacts.shareToken, token), isNull(projects.deletedAt), eq(organizations.active, true)));
  return row ?? null;
}
