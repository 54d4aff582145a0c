import { and, desc, eq, sql } from 'drizzle-orm';
import type { ServiceContext } from '../core/context.js';
import type { Queryable } from '../db/client.js';
import { chats, chatTurns } from '../db/schema/index.js';
import { presentChat } from '../modules/chats/presenter.js';
import type { ChatView } from '../modules/chats/schemas.js';
import { turnIdOfStreamKey } from './events.js';

/** How long after its end a turn's stream can still be reattached with GET /chats/:id/stream. */
export const REATTACH_WINDOW_MINUTES = 10;

export interface AttachableTurn {
  id: number;
  running: boolean;
}

/** The chat's turn in progress, or its last one if it ended (or its process died) less than 10 minutes ago. */
export async function attachableTurn(db: Queryable, chatId: number): Promise<AttachableTurn | null> {
  const [turn] = await db
    .select({
      id: chatTurns.id,
      running: sql<boolean>`${chatTurns.status} = 'running' and ${chatTurns.leaseExpiresAt} > now()`,
      // A turn whose process died never finished: its lease's end counts as its end.
      recent: sql<boolean>`coalesce(${chatTurns.finishedAt}, ${chatTurns.leaseExpiresAt}) > now() - make_interval(mins => ${REATTACH_WINDOW_MINUTES})`,
    })
    .from(chatTurns)
    .where(eq(chatTurns.chatId, chatId))
    .orderBy(desc(chatTurns.id))
    .limit(1);
  if (!turn || !(turn.running || turn.recent)) return null;
  return { id: turn.id, running: turn.running };
}

/** The chat a chat-turn stream belongs to (for the `chat` of a create's events). */
export async function chatOfStream(ctx: ServiceContext, ref: string): Promise<ChatView | undefined> {
  const turnId = turnIdOfStreamKey(ref);
  if (turnId === null) return undefined;
  const [row] = await ctx.db
    .select({ chat: chats })
    .from(chatTurns)
    .innerJoin(chats, eq(chats.id, chatTurns.chatId))
    .where(and(eq(chatTurns.id, turnId), eq(chats.organizationId, ctx.principal.organizationId)));
  return row ? presentChat(row.chat) : undefined;
}
