import type { Tool } from 'ai';
import { and, eq, inArray, or } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { documentChunks, type MessageCitation } from '../db/schema/index.js';
import { KNOWLEDGE_SEARCH_TOOL } from '../llm/builtin-model.js';

/** A cited passage's quote is its text up to this many characters. */
const MAX_QUOTE_CHARS = 500;
const MARKER = /\[(\d{1,4})\]/g;

export const CITATION_NOTE =
  'The passages knowledge_search returns are numbered (`marker`). When your answer uses a passage, cite it with its marker in square brackets, e.g. [1], right after the statement it supports.';

interface LedgerPassage {
  document_id: number;
  document_name: string;
  position: number;
  text: string;
}

/**
 * The passages `knowledge_search` returned during one turn, numbered from 1 in the order they
 * arrived (across every search of the turn), so the reply's `[n]` markers can be resolved.
 */
export class PassageLedger {
  private readonly passages: LedgerPassage[] = [];

  get size(): number {
    return this.passages.length;
  }

  /** The tools with `knowledge_search` numbering its passages (`marker` first in each). */
  wrapTools(tools: Record<string, Tool>): Record<string, Tool> {
    const search = tools[KNOWLEDGE_SEARCH_TOOL];
    if (!search?.execute) return tools;
    const execute = search.execute;
    return {
      ...tools,
      [KNOWLEDGE_SEARCH_TOOL]: {
        ...search,
        execute: async (input: unknown, options: Parameters<typeof execute>[1]) =>
          this.number(await execute(input, options)),
      } as Tool,
    };
  }

  private number(output: unknown): unknown {
    if (!isRecord(output) || !Array.isArray(output.passages)) return output;
    return {
      ...output,
      passages: output.passages.map((passage) => {
        if (!isRecord(passage) || typeof passage.text !== 'string') return passage;
        this.passages.push({
          document_id: Number(passage.document_id),
          document_name: String(passage.document_name ?? ''),
          position: Number(passage.position ?? 0),
          text: passage.text,
        });
        return { marker: this.passages.length, ...passage };
      }),
    };
  }

  /**
   * The reply's citations: one per marker that names a passage of this turn, in order of first
   * appearance; a marker without a passage is ignored. `chunk_id` is the stored chunk (null when
   * the passage has none, e.g. its document was deleted meanwhile).
   */
  async citationsOf(db: Queryable, organizationId: number, text: string): Promise<MessageCitation[]> {
    if (this.passages.length === 0) return [];
    const markers: number[] = [];
    for (const match of text.matchAll(MARKER)) {
      const marker = Number(match[1]);
      if (marker >= 1 && marker <= this.passages.length && !markers.includes(marker)) markers.push(marker);
    }
    if (markers.length === 0) return [];
    const cited = markers.map((marker) => ({ marker, passage: this.passages[marker - 1] }));
    const chunks = await chunkIds(
      db,
      organizationId,
      cited.map((c) => c.passage),
    );
    return cited.map(({ marker, passage }) => ({
      marker,
      document_id: passage.document_id,
      document_name: passage.document_name,
      chunk_id: chunks.get(`${passage.document_id}:${passage.position}`) ?? null,
      quote:
        passage.text.length > MAX_QUOTE_CHARS
          ? `${passage.text.slice(0, MAX_QUOTE_CHARS - 1)}…`
          : passage.text,
    }));
  }
}

async function chunkIds(
  db: Queryable,
  organizationId: number,
  passages: LedgerPassage[],
): Promise<Map<string, number>> {
  const valid = passages.filter(
    (p) => Number.isSafeInteger(p.document_id) && Number.isSafeInteger(p.position),
  );
  if (valid.length === 0) return new Map();
  const rows = await db
    .select({
      id: documentChunks.id,
      documentId: documentChunks.documentId,
      position: documentChunks.position,
    })
    .from(documentChunks)
    .where(
      and(
        eq(documentChunks.organizationId, organizationId),
        inArray(
          documentChunks.documentId,
          valid.map((p) => p.document_id),
        ),
        or(
          ...valid.map((p) =>
            and(eq(documentChunks.documentId, p.document_id), eq(documentChunks.position, p.position)),
          ),
        ),
      ),
    );
  return new Map(rows.map((r) => [`${r.documentId}:${r.position}`, r.id]));
}

function isRecord(value: unknown): value is Record<string, any> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
