import { and, asc, eq } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { chatTurns, toolApprovals } from '../db/schema/index.js';
import { ApiError } from '../http/errors.js';
import { formatTimestamp } from '../http/timestamps.js';
import type { MessageView, PendingApproval } from '../modules/chats/schemas.js';
import { messageView } from '../modules/chats/service.js';
import type { StreamHub } from '../streams/stream-hub.js';
import { asTurnEvent, turnStreamKey } from './events.js';
import { TURN_INTERRUPTED_MESSAGE } from './failure.js';
import type { TurnPlan } from './plan.js';

/** Where a client waiting on a turn gets its answer. */
export type TurnStop =
  | { kind: 'done'; message: MessageView }
  | { kind: 'paused'; message: MessageView }
  | { kind: 'failed'; error: ApiError };

export interface TurnStopWatch {
  /** The first stop of the turn from now on; never rejects. */
  next: Promise<TurnStop>;
  /** Ends the subscription (the answer was given, or the client left). */
  stop(): void;
}

export interface TurnStopDeps {
  db: Queryable;
  streams: StreamHub;
  /** Whether the turn's process is known dead (TurnRunner.isDead). */
  isDead: (turnId: number) => Promise<boolean>;
}

/** The tool calls of a turn still waiting for a decision, oldest first. */
export async function pendingApprovals(db: Queryable, turnId: number): Promise<PendingApproval[]> {
  const rows = await db
    .select()
    .from(toolApprovals)
    .where(and(eq(toolApprovals.turnId, turnId), eq(toolApprovals.status, 'pending')))
    .orderBy(asc(toolApprovals.id));
  return rows.map((row) => ({
    tool_call_id: row.toolCallId,
    tool_name: row.toolName,
    parameters: row.parameters,
    expires_at: formatTimestamp(row.expiresAt),
  }));
}

/**
 * Follows a turn's stream, from its first event and from any process, to the point where a
 * waiting client gets its answer: `done`, `error`, or a pause (an `approval_required` whose tool
 * call is still pending). A paused reply is answered as its message so far: the text streamed
 * until then, the tool executions recorded, `status: "requires_action"` and `pending_approvals`.
 */
export function watchTurnStops(
  deps: TurnStopDeps,
  turn: { turnId: number; messageId?: number },
): TurnStopWatch {
  let settle!: (stop: TurnStop) => void;
  let settled = false;
  const next = new Promise<TurnStop>((resolve) => {
    settle = (stop) => {
      if (settled) return;
      settled = true;
      resolve(stop);
    };
  });
  let text = '';
  // Events are handled in order, one at a time: a pause is checked against the database.
  let queue = Promise.resolve();
  const handle = (step: () => Promise<void> | void) => {
    queue = queue.then(async () => {
      if (settled) return;
      await step();
    });
    queue = queue.catch((err) =>
      settle({
        kind: 'failed',
        error: err instanceof ApiError ? err : new ApiError(500, 'internal', String(err)),
      }),
    );
  };
  const unsubscribe = deps.streams.subscribe(
    turnStreamKey(turn.turnId),
    0,
    {
      onEvent: (stored) => {
        const event = asTurnEvent(stored);
        handle(async () => {
          if (event.name === 'content') text += event.data.content;
          else if (event.name === 'done') settle({ kind: 'done', message: event.data.message });
          else if (event.name === 'error')
            settle({
              kind: 'failed',
              error: new ApiError(event.data.code, 'turn_failed', event.data.message),
            });
          else if (event.name === 'approval_required') {
            const pending = await pendingApprovals(deps.db, turn.turnId);
            if (!pending.some((p) => p.tool_call_id === event.data.tool_call_id)) return;
            const message = await messageView(
              deps.db,
              turn.messageId ?? (await replyOf(deps.db, turn.turnId)),
            );
            settle({
              kind: 'paused',
              message: { ...message, content: text, status: 'requires_action', pending_approvals: pending },
            });
          }
        });
      },
      onEnd: (reason) => {
        if (reason === 'ended') return;
        handle(() =>
          settle({
            kind: 'failed',
            error:
              reason === 'lost'
                ? new ApiError(500, 'turn_interrupted', TURN_INTERRUPTED_MESSAGE)
                : new ApiError(503, 'server_closing', 'This server is shutting down; the turn goes on'),
          }),
        );
      },
    },
    { abandoned: () => deps.isDead(turn.turnId) },
  );
  return { next, stop: unsubscribe };
}

/** For a blocking request: its turn's pauses, watched only when the chat's agent gates any tool. */
export function watchPauses(
  deps: TurnStopDeps,
  plan: TurnPlan,
  turn: { turnId: number; assistantMessageId?: number },
): TurnStopWatch | undefined {
  if (!plan.agent || plan.agent.toolsRequiringApproval.length === 0) return undefined;
  return watchTurnStops(deps, { turnId: turn.turnId, messageId: turn.assistantMessageId });
}

/** `waiting`, or the turn's reply so far as soon as it pauses for approvals (then `pauses` stops). */
export async function untilPaused<T>(
  waiting: Promise<T>,
  pauses: TurnStopWatch | undefined,
): Promise<T | MessageView> {
  if (!pauses) return waiting;
  const paused = new Promise<MessageView>((resolve) => {
    void pauses.next.then((stop) => {
      if (stop.kind === 'paused') resolve(stop.message);
    });
  });
  return Promise.race([waiting, paused]).finally(() => pauses.stop());
}

async function replyOf(db: Queryable, turnId: number): Promise<number> {
  const [turn] = await db
    .select({ messageId: chatTurns.assistantMessageId })
    .from(chatTurns)
    .where(eq(chatTurns.id, turnId));
  if (!turn?.messageId) throw new ApiError(500, 'internal', 'The turn has no reply');
  return turn.messageId;
}
