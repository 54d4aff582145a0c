import { createHash } from 'node:crypto';
import { and, count, desc, eq, inArray, type SQL } from 'drizzle-orm';
import { recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import {
  type DocumentRow,
  documentChunks,
  documentContents,
  documentGroups,
  documents,
  groupMembers,
} from '../../db/schema/index.js';
import { forbidden, notFound } from '../../http/errors.js';
import { offsetOf } from '../../http/pagination.js';
import type { JobQueue } from '../../jobs/queue.js';
import { detectMediaType } from '../../knowledge/media-type.js';
import { PROCESS_DOCUMENT_JOB, type ProcessDocumentJob } from '../../knowledge/process.js';
import { documentVisibleTo } from '../../policies/documents.js';
import { isAdmin } from '../../policies/roles.js';
import { checkGroupIds, defaultGroupId } from '../groups/references.js';
import { linkedIds } from '../link-tables.js';

import type { DocumentListQuery } from './schemas.js';

export interface UploadInput {
  name: string;
  bytes: Buffer;
  groupIds: number[];
  useDefaultGroup: boolean;
}

/** Processing is retried with backoff when the database fails it; the file's own problems are final. */
const JOB_OPTIONS = { retryLimit: 5, retryDelay: 10, retryBackoff: true, expireInSeconds: 30 * 60 };

async function groupIdsOf(db: Queryable, ids: number[]) {
  return linkedIds(db, documentGroups, documentGroups.documentId, documentGroups.groupId, ids);
}

/** Groups the caller may put a document in: admins any group of the organization, members their own. */
async function uploadGroups(ctx: ServiceContext, input: UploadInput): Promise<number[]> {
  const orgId = ctx.principal.organizationId;
  const ids = await checkGroupIds(ctx.db, orgId, input.groupIds, 'group_ids[]');
  if (input.useDefaultGroup) {
    const fallback = await defaultGroupId(ctx.db, orgId);
    if (!ids.includes(fallback)) ids.push(fallback);
  }
  if (!isAdmin(ctx.principal)) {
    const own = await ctx.db
      .select({ groupId: groupMembers.groupId })
      .from(groupMembers)
      .where(and(eq(groupMembers.userId, ctx.principal.userId ?? 0), inArray(groupMembers.groupId, ids)));
    const mine = new Set(own.map((row) => row.groupId));
    const foreign = ids.filter((id) => !mine.has(id));
    if (foreign.length > 0) {
      throw forbidden(
        `Members may upload only to their own groups; not a member of group ${foreign.join(', ')}`,
      );
    }
  }
  return ids.sort((a, b) => a - b);
}

/**
 * Stores the file and its job in one transaction: the document exists exactly when its processing
 * is queued, so a crash can neither lose an upload's processing nor process a missing upload.
 */
export async function uploadDocument(ctx: ServiceContext, jobs: JobQueue, input: UploadInput) {
  const groupIds = await uploadGroups(ctx, input);
  const mediaType = await detectMediaType(input.bytes, input.name);
  const sha256 = createHash('sha256').update(input.bytes).digest('hex');
  const row = await ctx.db.transaction(async (tx) => {
    const [created] = await tx
      .insert(documents)
      .values({
        organizationId: ctx.principal.organizationId,
        name: input.name,
        mediaType,
        sizeBytes: input.bytes.length,
        sha256,
        uploadedByUserId: ctx.principal.userId,
        apiKeyId: ctx.principal.keyId,
      })
      .returning();
    await tx.insert(documentContents).values({ documentId: created.id, bytes: input.bytes });
    await tx.insert(documentGroups).values(groupIds.map((groupId) => ({ documentId: created.id, groupId })));
    const job: ProcessDocumentJob = { documentId: created.id };
    await jobs.send(PROCESS_DOCUMENT_JOB, job, { db: tx, ...JOB_OPTIONS });
    await recordAudit(tx, ctx, {
      action: 'document.created',
      resource: { type: 'document', id: created.id },
      changedFields: ['file', ...(input.groupIds.length > 0 ? ['group_ids'] : [])],
    });
    return created;
  });
  return { row, groupIds };
}

export async function listDocuments(ctx: ServiceContext, query: DocumentListQuery) {
  const conditions: SQL[] = [documentVisibleTo(ctx.principal)];
  if (query.processing_status) conditions.push(eq(documents.processingStatus, query.processing_status));
  const where = and(...conditions);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(documents)
      .where(where)
      .orderBy(desc(documents.id))
      .limit(query.page_size)
      .offset(offsetOf(query)),
    ctx.db.select({ total: count() }).from(documents).where(where),
  ]);
  const ids = rows.map((row) => row.id);
  const [groups, chunks] = await Promise.all([groupIdsOf(ctx.db, ids), chunkCounts(ctx.db, ids)]);
  return {
    rows: rows.map((row) => ({ row, groupIds: groups.get(row.id)!, chunkCount: chunks.get(row.id) ?? 0 })),
    total,
  };
}

async function chunkCounts(db: Queryable, ids: number[]): Promise<Map<number, number>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .select({ documentId: documentChunks.documentId, n: count() })
    .from(documentChunks)
    .where(inArray(documentChunks.documentId, ids))
    .groupBy(documentChunks.documentId);
  return new Map(rows.map((row) => [row.documentId, Number(row.n)]));
}

async function visibleDocument(ctx: ServiceContext, id: number): Promise<DocumentRow> {
  const [row] = await ctx.db
    .select()
    .from(documents)
    .where(and(eq(documents.id, id), documentVisibleTo(ctx.principal)));
  if (!row) throw notFound('Document');
  return row;
}

export async function getDocument(ctx: ServiceContext, id: number) {
  const row = await visibleDocument(ctx, id);
  const [groups, chunks] = await Promise.all([groupIdsOf(ctx.db, [id]), chunkCounts(ctx.db, [id])]);
  return { row, groupIds: groups.get(id)!, chunkCount: chunks.get(id) ?? 0 };
}

/**
 * Removes the document with its bytes, chunks and vectors (all cascade from the row). Members may
 * delete only what they uploaded; admins anything in the organization.
 */
export async function deleteDocument(ctx: ServiceContext, id: number): Promise<void> {
  const row = await visibleDocument(ctx, id);
  if (!isAdmin(ctx.principal) && row.uploadedByUserId !== ctx.principal.userId) {
    throw forbidden('Members may delete only documents they uploaded');
  }
  await ctx.db.transaction(async (tx) => {
    await tx.delete(documents).where(eq(documents.id, id));
    await recordAudit(tx, ctx, { action: 'document.deleted', resource: { type: 'document', id } });
  });
}
