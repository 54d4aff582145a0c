import { and, eq, inArray, lt, sql } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { type ChatTurnStatus, chatMessages, chatTurns } from '../db/schema/index.js';
import { ApiError } from '../http/errors.js';
import { turnStreamKey } from './events.js';
import { recordTurnFailed } from './webhook-events.js';

/**
 * The one-turn-per-chat rule (spec 8), held in the database so it spans processes: a `running`
 * row in `chat_turns` (unique per chat) with an expiry the live turn keeps pushing forward. A
 * process that dies stops renewing, and the next turn retires its row once the lease ran out.
 */
export async function acquireTurnLease(
  tx: Queryable,
  lease: {
    organizationId: number;
    /** The chat's project, for the retired turns' `chat_turn_failed` events. */
    projectId: number;
    chatId: number;
    leaseMs: number;
    userMessageId?: number;
    assistantMessageId?: number;
  },
): Promise<number> {
  const stale = await tx
    .update(chatTurns)
    .set({ status: 'expired', finishedAt: sql`now()` })
    .where(
      and(
        eq(chatTurns.chatId, lease.chatId),
        eq(chatTurns.status, 'running'),
        lt(chatTurns.leaseExpiresAt, sql`now()`),
      ),
    )
    .returning({
      id: chatTurns.id,
      userMessageId: chatTurns.userMessageId,
      assistantMessageId: chatTurns.assistantMessageId,
    });
  const orphans = stale.flatMap((t) => [t.userMessageId, t.assistantMessageId]).filter((id) => id !== null);
  if (orphans.length > 0) {
    // The dead process's turn never finished: both messages show as failed in history.
    await tx
      .update(chatMessages)
      .set({ status: 'failed', error: INTERRUPTED })
      .where(inArray(chatMessages.id, orphans));
    // Its reply keeps what was streamed before the process stopped (the stored events).
    for (const turn of stale) {
      if (turn.assistantMessageId === null) continue;
      await tx
        .update(chatMessages)
        .set({ content: partialReplySql(turn.id) })
        .where(eq(chatMessages.id, turn.assistantMessageId));
      await recordTurnFailed(
        tx,
        {
          organizationId: lease.organizationId,
          projectId: lease.projectId,
          chatId: lease.chatId,
          messageId: turn.assistantMessageId,
        },
        { code: 'turn_interrupted', message: INTERRUPTED },
      );
    }
  }

  const [turn] = await tx
    .insert(chatTurns)
    .values({
      organizationId: lease.organizationId,
      chatId: lease.chatId,
      status: 'running',
      userMessageId: lease.userMessageId ?? null,
      assistantMessageId: lease.assistantMessageId ?? null,
      leaseExpiresAt: sql`now() + make_interval(secs => ${lease.leaseMs / 1000})`,
    })
    .onConflictDoNothing()
    .returning({ id: chatTurns.id });
  if (!turn) throw await turnInProgress(tx, lease.chatId);
  return turn.id;
}

/**
 * The 409 of a busy chat (spec 8), naming the running turn and where to follow it:
 * `response.running_turn: {id, stream_url}` (issue 17).
 */
async function turnInProgress(tx: Queryable, chatId: number): Promise<ApiError> {
  const [running] = await tx
    .select({ id: chatTurns.id })
    .from(chatTurns)
    .where(and(eq(chatTurns.chatId, chatId), eq(chatTurns.status, 'running')));
  return new ApiError(
    409,
    'turn_in_progress',
    'Another message is being processed for this chat; wait for its reply, then send again',
    {},
    running ? { running_turn: { id: running.id, stream_url: `/api/v2/chats/${chatId}/stream` } } : {},
  );
}

/** Why a turn's messages failed when its process stopped without finishing it. */
export const INTERRUPTED = 'The turn was interrupted (its process stopped)';

/** The text a turn streamed before it stopped, from its stored `content` events. */
export const partialReplySql = (turnId: number) =>
  sql`coalesce((select string_agg(data->>'content', '' order by seq) from stream_events
    where stream_key = ${turnStreamKey(turnId)} and event = 'content'), '')`;

/**
 * Pushes the lease forward. `cancel`: a cancel request came for the turn meanwhile; `lost`: the
 * turn is no longer running (another process retired it, or a cancel took it over).
 */
export async function renewTurnLease(
  db: Queryable,
  turnId: number,
  leaseMs: number,
): Promise<'running' | 'cancel' | 'lost'> {
  const [row] = await db
    .update(chatTurns)
    .set({ leaseExpiresAt: sql`now() + make_interval(secs => ${leaseMs / 1000})` })
    .where(and(eq(chatTurns.id, turnId), eq(chatTurns.status, 'running')))
    .returning({ cancelRequestedAt: chatTurns.cancelRequestedAt });
  if (!row) return 'lost';
  return row.cancelRequestedAt != null ? 'cancel' : 'running';
}

/** Ends the lease; false when the turn was no longer running (its end was written by someone else). */
export async function releaseTurnLease(
  db: Queryable,
  turnId: number,
  status: Exclude<ChatTurnStatus, 'running' | 'expired'>,
): Promise<boolean> {
  const released = await db
    .update(chatTurns)
    .set({ status, finishedAt: sql`now()` })
    .where(and(eq(chatTurns.id, turnId), eq(chatTurns.status, 'running')))
    .returning({ id: chatTurns.id });
  return released.length > 0;
}

/**
 * Keeps a running turn's lease alive until stopped. Each renewal also reads the turn's cancel
 * request (the fallback for a cancel whose notification did not reach this process) and notices
 * a turn that is no longer this process's to run.
 */
export function keepLeaseAlive(
  db: Queryable,
  turnId: number,
  leaseMs: number,
  callbacks: { onError: (err: unknown) => void; onCancelRequested: () => void; onLost: () => void },
): () => void {
  // A renewal still in flight when the keeper stops reports nothing: the turn has ended.
  let stopped = false;
  const timer = setInterval(
    () => {
      renewTurnLease(db, turnId, leaseMs)
        .then((state) => {
          if (stopped) return;
          if (state === 'cancel') callbacks.onCancelRequested();
          else if (state === 'lost') callbacks.onLost();
        })
        .catch(callbacks.onError);
    },
    Math.max(50, Math.floor(leaseMs / 3)),
  );
  timer.unref();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
