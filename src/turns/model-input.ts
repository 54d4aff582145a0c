import type { ModelMessage, UserContent } from 'ai';
import { and, asc, desc, eq, inArray, sql } from 'drizzle-orm';
import type { Db, Queryable } from '../db/client.js';
import {
  type ChatAttachmentRow,
  chatAttachments,
  chatMessages,
  documentChunks,
  type MessageRow,
} from '../db/schema/index.js';
import { conversationMessage } from '../modules/chats/service.js';

/** A document attachment's text reaches the model up to about this many tokens (4 characters each). */
export const DOCUMENT_TOKEN_BUDGET = 8_000;
const CHARS_PER_TOKEN = 4;

/** Marks the text parts that carry an attachment, so a model (the built-in one) can tell them from the message. */
export const ATTACHMENT_PART = { scriptorium: { attachment: true } };

export interface ModelInputOptions {
  /** A regeneration: the conversation up to the user message answered again (its old reply left out). */
  uptoMessageId?: number;
  /** The messages that have attachments, when known (turnHistory): no query when none has. */
  attached?: ReadonlySet<number>;
}

/** What the model is given of a message of the conversation. */
export type HistoryMessage = Pick<MessageRow, 'id' | 'role' | 'content' | 'prompt'>;

export interface TurnHistory {
  /** The conversation (conversationMessage), oldest first, the newest `limit`. */
  rows: HistoryMessage[];
  /** Which of them have attachments. */
  attached: Set<number>;
}

/**
 * Built once per database handle: a prepared statement (named on PostgreSQL), so a turn neither
 * builds the query again (Drizzle's query building cost more CPU than the statement, issue 14)
 * nor waits for a second round trip to learn that no message has attachments.
 */
const historyQueries = new WeakMap<Db, ReturnType<typeof prepareHistory>>();
const prepareHistory = (db: Db) =>
  db
    .select({
      message: chatMessages,
      // Qualified by hand: Drizzle writes the columns of a one-table select unqualified, and an
      // unqualified "id" here would be the attachment's own.
      attached: sql<boolean>`exists (select 1 from chat_attachments ca where ca.message_id = "chat_messages"."id")`,
    })
    .from(chatMessages)
    .where(and(eq(chatMessages.chatId, sql.placeholder('chatId')), conversationMessage))
    .orderBy(desc(chatMessages.id))
    .limit(sql.placeholder('limit'))
    .prepare('turn_history');

/** A turn's view of the conversation so far, with which messages carry attachments. */
export async function turnHistory(db: Db, chatId: number, limit: number): Promise<TurnHistory> {
  let query = historyQueries.get(db);
  if (!query) {
    query = prepareHistory(db);
    historyQueries.set(db, query);
  }
  const found = await query.execute({ chatId, limit });
  const rows: HistoryMessage[] = [];
  const attached = new Set<number>();
  for (let i = found.length - 1; i >= 0; i--) {
    const { message, attached: has } = found[i]!;
    rows.push(message);
    if (has) attached.add(message.id);
  }
  return { rows, attached };
}

/**
 * The one place the conversation becomes the model's message list, whatever client calls the model:
 * each message's text (a skill's expanded prompt in place of its slash command), oldest first, and
 * on user messages their attachments: a document's extracted text (within DOCUMENT_TOKEN_BUDGET,
 * the cut marked) and images as image parts.
 */
export async function modelMessagesOf(
  db: Queryable,
  history: HistoryMessage[],
  options: ModelInputOptions = {},
): Promise<ModelMessage[]> {
  const { uptoMessageId, attached } = options;
  const rows = uptoMessageId === undefined ? history : history.filter((m) => m.id <= uptoMessageId);
  const attachments = await attachmentsWithContent(
    db,
    rows.filter((m) => m.role === 'user' && (!attached || attached.has(m.id))).map((m) => m.id),
  );
  const messages: ModelMessage[] = [];
  for (const m of rows) {
    const text = m.prompt ?? m.content;
    const attached = attachments.get(m.id);
    if (m.role === 'user' && attached) {
      const content: UserContent = [{ type: 'text', text }];
      for (const a of attached) content.push(a);
      messages.push({ role: 'user', content });
    } else if (text.length > 0) {
      messages.push({ role: m.role, content: text });
    }
  }
  return messages;
}

type AttachmentPart = Exclude<UserContent, string>[number];

async function attachmentsWithContent(
  db: Queryable,
  messageIds: number[],
): Promise<Map<number, AttachmentPart[]>> {
  const byMessage = new Map<number, AttachmentPart[]>();
  if (messageIds.length === 0) return byMessage;
  const rows = await db
    .select()
    .from(chatAttachments)
    .where(inArray(chatAttachments.messageId, messageIds))
    .orderBy(asc(chatAttachments.messageId), asc(chatAttachments.position));
  if (rows.length === 0) return byMessage;
  const texts = await documentTexts(
    db,
    rows.flatMap((r) => (r.type === 'document' && r.documentId !== null ? [r.documentId] : [])),
  );
  for (const row of rows)
    byMessage.set(row.messageId, [...(byMessage.get(row.messageId) ?? []), partOf(row, texts)]);
  return byMessage;
}

function partOf(row: ChatAttachmentRow, texts: Map<number, string>): AttachmentPart {
  if (row.type === 'image' && row.data)
    return { type: 'image', image: new Uint8Array(row.data), mediaType: row.mediaType };
  const text = row.documentId === null ? undefined : texts.get(row.documentId);
  const body = text === undefined ? '[The document is no longer available.]' : withinBudget(text);
  return {
    type: 'text',
    text: `<attached_document name="${escapeAttribute(row.name ?? '')}" document_id="${row.documentId ?? ''}">\n${body}\n</attached_document>`,
    providerOptions: ATTACHMENT_PART,
  };
}

/** The text up to the budget, cut at a line or word, with the cut marked. */
export function withinBudget(text: string, tokens = DOCUMENT_TOKEN_BUDGET): string {
  const max = tokens * CHARS_PER_TOKEN;
  if (text.length <= max) return text;
  const slice = text.slice(0, max);
  const at = Math.max(slice.lastIndexOf('\n'), slice.lastIndexOf(' '));
  const kept = at > max / 2 ? slice.slice(0, at) : slice;
  const left = Math.ceil((text.length - kept.length) / CHARS_PER_TOKEN);
  return `${kept}\n[… the document is cut here: about ${left} more tokens not shown …]`;
}

/** A processed document's text: its chunks in order (neighbouring chunks overlap a little). */
async function documentTexts(db: Queryable, documentIds: number[]): Promise<Map<number, string>> {
  const texts = new Map<number, string>();
  if (documentIds.length === 0) return texts;
  const chunks = await db
    .select({ documentId: documentChunks.documentId, content: documentChunks.content })
    .from(documentChunks)
    .where(inArray(documentChunks.documentId, [...new Set(documentIds)]))
    .orderBy(asc(documentChunks.documentId), asc(documentChunks.position));
  for (const chunk of chunks) {
    const before = texts.get(chunk.documentId);
    texts.set(chunk.documentId, before === undefined ? chunk.content : `${before}\n\n${chunk.content}`);
  }
  return texts;
}

function escapeAttribute(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
}
