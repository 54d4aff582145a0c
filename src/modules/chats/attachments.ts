import { type Static, Type } from '@sinclair/typebox';
import { and, asc, getTableColumns, inArray } from 'drizzle-orm';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import { type ChatAttachmentRow, chatAttachments, documents } from '../../db/schema/index.js';
import { badRequest } from '../../http/errors.js';
import { Id, Nullable } from '../../http/schemas.js';
import { IMAGE_FORMAT_NAMES, imageInfo } from '../../llm/image-info.js';
import { documentVisibleToProject } from '../../policies/documents.js';

export const MAX_ATTACHMENTS = 10;
export const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
/** The largest chat request body: ten images of 5 MB in base64, and the rest of the message. */
export const ATTACHMENT_BODY_LIMIT = Math.ceil((MAX_ATTACHMENTS * MAX_IMAGE_BYTES * 4) / 3) + 2 * 1024 * 1024;

const DocumentAttachmentInput = Type.Object(
  {
    type: Type.Literal('document'),
    document_id: Id({ description: "A processed knowledge-base document visible to the chat's project" }),
  },
  { title: 'DocumentAttachmentInput' },
);
const ImageAttachmentInput = Type.Object(
  {
    type: Type.Literal('image'),
    data_url: Type.String({
      maxLength: Math.ceil((MAX_IMAGE_BYTES * 4) / 3) + 64,
      description: '`data:image/png|jpeg|webp|gif;base64,...`, at most 5 MB decoded',
    }),
  },
  { title: 'ImageAttachmentInput' },
);
export const AttachmentsInput = Type.Array(Type.Union([DocumentAttachmentInput, ImageAttachmentInput]), {
  maxItems: MAX_ATTACHMENTS,
  description:
    "Sent with the message (at most 10): a document's extracted text reaches the model (within a token budget, the cut marked); an image is stored once and sent as an image part",
});
export type AttachmentsInput = Static<typeof AttachmentsInput>;

export const AttachmentView = Type.Object(
  {
    id: Type.Integer({ description: 'For GET /chats/:id/attachments/:attachment_id (images)' }),
    type: Type.Union([Type.Literal('document'), Type.Literal('image')]),
    document_id: Type.Optional(Nullable(Type.Integer({ description: 'Documents: null once deleted' }))),
    name: Type.Optional(Type.String({ description: "Documents: the document's name" })),
    media_type: Type.String(),
    size_bytes: Type.Integer(),
  },
  { title: 'Attachment' },
);
export type AttachmentView = Static<typeof AttachmentView>;

/** An attachment checked and ready to store with its user message. */
export type PreparedAttachment = Pick<
  ChatAttachmentRow,
  'type' | 'documentId' | 'name' | 'mediaType' | 'sizeBytes' | 'data'
>;

const DATA_URL = /^data:(image\/(?:png|jpeg|webp|gif));base64,([A-Za-z0-9+/\s]*={0,2})$/;

/**
 * Checks a message's attachments before anything is written: each document must be visible to
 * the chat's project and processed, each image a well-formed data URL of at most 5 MB whose bytes
 * are the image type it names (400 otherwise).
 */
export async function prepareAttachments(
  ctx: ServiceContext,
  projectId: number,
  inputs: AttachmentsInput | undefined,
): Promise<PreparedAttachment[] | undefined> {
  if (!inputs || inputs.length === 0) return undefined;
  const documentIds = inputs.flatMap((a) => (a.type === 'document' ? [a.document_id] : []));
  const found =
    documentIds.length === 0
      ? []
      : await ctx.db
          .select({
            id: documents.id,
            name: documents.name,
            mediaType: documents.mediaType,
            sizeBytes: documents.sizeBytes,
            status: documents.processingStatus,
          })
          .from(documents)
          .where(and(inArray(documents.id, documentIds), documentVisibleToProject(ctx.principal, projectId)));
  const byId = new Map(found.map((d) => [d.id, d]));
  return inputs.map((input, index) => {
    const field = `attachments[${index}]`;
    if (input.type === 'document') {
      const doc = byId.get(input.document_id);
      if (!doc)
        throw badRequest(
          `Document ${input.document_id} is not visible to the chat's project (it does not exist, or shares no group with the project and the key)`,
          { [field]: ['document not visible to the project'] },
          'attachment_not_visible',
        );
      if (doc.status !== 'completed')
        throw badRequest(
          `Document ${input.document_id} is not processed (${doc.status}): only processed documents can be attached`,
          { [field]: [`document is ${doc.status}`] },
          'attachment_not_processed',
        );
      return {
        type: 'document' as const,
        documentId: doc.id,
        name: doc.name,
        mediaType: doc.mediaType,
        sizeBytes: doc.sizeBytes,
        data: null,
      };
    }
    return { type: 'image' as const, documentId: null, name: null, ...decodeImage(input.data_url, field) };
  });
}

function decodeImage(dataUrl: string, field: string) {
  const bad = (why: string) => badRequest(`${field}: ${why}`, { [field]: [why] }, 'invalid_attachment');
  const match = DATA_URL.exec(dataUrl);
  if (!match) throw bad('data_url must be data:image/png|jpeg|webp|gif;base64,<data>');
  const bytes = Buffer.from(match[2], 'base64');
  if (bytes.length === 0) throw bad('the image is empty');
  if (bytes.length > MAX_IMAGE_BYTES) throw bad(`the image is larger than 5 MB (${bytes.length} bytes)`);
  const info = imageInfo(bytes);
  if (!info || info.mediaType !== match[1])
    throw bad(
      `the data is not a valid ${IMAGE_FORMAT_NAMES[match[1] as keyof typeof IMAGE_FORMAT_NAMES]} image`,
    );
  return { mediaType: info.mediaType, sizeBytes: bytes.length, data: bytes };
}

/** Writes a user message's attachments (inside the turn's transaction). */
export async function storeAttachments(
  tx: Queryable,
  target: { organizationId: number; chatId: number; messageId: number },
  prepared: PreparedAttachment[] | undefined,
): Promise<void> {
  if (!prepared || prepared.length === 0) return;
  await tx.insert(chatAttachments).values(prepared.map((a, position) => ({ ...target, ...a, position })));
}

const { data: _data, ...metaColumns } = getTableColumns(chatAttachments);

/** The attachments of messages (without image bytes), by message, in order. */
export async function attachmentsOf(
  db: Queryable,
  messageIds: number[],
): Promise<Map<number, Omit<ChatAttachmentRow, 'data'>[]>> {
  const byMessage = new Map<number, Omit<ChatAttachmentRow, 'data'>[]>();
  if (messageIds.length === 0) return byMessage;
  const rows = await db
    .select(metaColumns)
    .from(chatAttachments)
    .where(inArray(chatAttachments.messageId, messageIds))
    .orderBy(asc(chatAttachments.messageId), asc(chatAttachments.position));
  for (const row of rows) byMessage.set(row.messageId, [...(byMessage.get(row.messageId) ?? []), row]);
  return byMessage;
}

/** As history shows it: never the bytes. */
export const presentAttachment = (row: Omit<ChatAttachmentRow, 'data'>): AttachmentView => ({
  id: row.id,
  type: row.type,
  ...(row.type === 'document' ? { document_id: row.documentId, name: row.name ?? '' } : {}),
  media_type: row.mediaType,
  size_bytes: row.sizeBytes,
});

/** A fork's copies: the attachments of the copied messages (`idOf`: original id to copy id). */
export async function copyAttachments(
  tx: Queryable,
  idOf: Map<number, number>,
  chatId: number,
): Promise<void> {
  const rows = await tx
    .select()
    .from(chatAttachments)
    .where(inArray(chatAttachments.messageId, [...idOf.keys()]));
  if (rows.length === 0) return;
  await tx
    .insert(chatAttachments)
    .values(rows.map(({ id: _id, ...row }) => ({ ...row, chatId, messageId: idOf.get(row.messageId)! })));
}
