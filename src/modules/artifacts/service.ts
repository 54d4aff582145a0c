import { eq, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import { artifacts } from '../../db/schema/index.js';
import { unprocessable } from '../../http/errors.js';
import { type ArtifactRecord, findArtifact } from './lookup.js';

export interface UpdateArtifactInput {
  name?: string;
  content?: string;
  notes?: string | null;
}

export function getArtifact(ctx: ServiceContext, slug: string, artifactId: number): Promise<ArtifactRecord> {
  return findArtifact(ctx, artifactId, slug);
}

/**
 * A person's edit. `manually_edited` turns true when the content really changes and stays true;
 * the next refinement shows the model the edited text.
 */
export async function updateArtifact(
  ctx: ServiceContext,
  slug: string,
  artifactId: number,
  input: UpdateArtifactInput,
): Promise<ArtifactRecord> {
  const artifact = await findArtifact(ctx, artifactId, slug);
  if (input.name !== undefined && input.name.trim() === '') {
    throw unprocessable('name must not be blank', { name: ['must not be blank'] });
  }
  const contentChanged = input.content !== undefined && input.content !== artifact.content;
  const changes = {
    ...(input.name !== undefined ? { name: input.name.trim() } : {}),
    ...(input.content !== undefined ? { content: input.content } : {}),
    ...(input.notes !== undefined ? { notes: input.notes } : {}),
    ...(contentChanged ? { manuallyEdited: true, parsed: null } : {}),
  };
  if (Object.keys(changes).length > 0) {
    await ctx.db.transaction(async (tx) => {
      await tx
        .update(artifacts)
        .set({ ...changes, updatedAt: sql`now()` })
        .where(eq(artifacts.id, artifact.id));
      await recordAudit(tx, ctx, {
        action: 'artifact.updated',
        resource: { type: 'artifact', id: artifact.id },
        changedFields: fieldsOf(input),
      });
    });
  }
  return findArtifact(ctx, artifactId, slug);
}

export async function deleteArtifact(ctx: ServiceContext, slug: string, artifactId: number): Promise<void> {
  const artifact = await findArtifact(ctx, artifactId, slug);
  await ctx.db.transaction(async (tx) => {
    await tx.delete(artifacts).where(eq(artifacts.id, artifact.id));
    await recordAudit(tx, ctx, {
      action: 'artifact.deleted',
      resource: { type: 'artifact', id: artifact.id },
    });
  });
}
