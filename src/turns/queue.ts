import { and, count, eq, isNull, or, sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import { type ServiceContext, type ServiceResources, serviceContext } from '../core/context.js';
import {
  apiKeys,
  chats,
  chatTurns,
  organizations,
  type QueuedMessageRow,
  chatQueuedMessages as queued,
  users,
} from '../db/schema/index.js';
import { ApiError, conflict, notFound, toApiError } from '../http/errors.js';
import { formatTimestamp } from '../http/timestamps.js';
import type { MessageView } from '../modules/chats/schemas.js';
import { prepareTurn } from '../modules/chats/service.js';
import type { StreamHub } from '../streams/stream-hub.js';
import { asTurnEvent, turnStreamKey } from './events.js';
import { TURN_INTERRUPTED_MESSAGE } from './failure.js';
import type { TurnPlan } from './plan.js';
import { positionOf, QUEUE_CHANNEL, QUEUE_LIMIT, queueOrder, waitingIn } from './queue-store.js';
import type { TurnOutcome, TurnRunner } from './runner.js';

/** `if_busy` of POST /chats/:id/messages (issue 17). */
export const BUSY_POLICIES = ['reject', 'enqueue', 'interrupt'] as const;
export type BusyPolicy = (typeof BUSY_POLICIES)[number];

/** How often a waiting client reads its message's state when no notification came. */
const FOLLOW_POLL_MS = 1000;
/** How long the outcome of a turn started here stays at hand for its waiting client. */
const KEEP_OUTCOME_MS = 60_000;

/** What became of a queued message: its turn started, or it will never run (the client's answer). */
export type QueuedFate =
  | { kind: 'started'; turnId: number; outcome: Promise<TurnOutcome> | null }
  | { kind: 'refused'; error: ApiError };

export interface QueueEntryView {
  message_id: number;
  content: string;
  position: number;
  created_at: string;
}

/** The queued message was removed, dropped or started elsewhere while its turn was beginning here. */
class ClaimLost extends Error {}

/**
 * The busy queue of chats (issue 17 item 1). Messages wait in `chat_queued_messages`; whichever
 * process finds the chat free starts the next one (its turn takes the chat's lease and marks the
 * message started in one transaction, so it runs once). A process learns that a chat became free
 * from the running turn's stream (`watch`), from the end of a turn it started, and, as the
 * fallback that also covers a process that died, from `sweep` (a repeated job on every process).
 */
export class ChatQueue {
  private readonly kicking = new Map<number, Promise<void>>();
  private readonly kickAgain = new Set<number>();
  private readonly watched = new Map<number, () => void>();
  private readonly startedHere = new Map<number, Promise<TurnOutcome>>();
  private readonly waiters = new Map<number, Set<() => void>>();
  private listening = false;
  private closed = false;

  constructor(
    private readonly deps: {
      resources: ServiceResources;
      streams: StreamHub;
      turns: TurnRunner;
      log: FastifyBaseLogger;
    },
  ) {}

  private get db() {
    return this.deps.resources.database.db;
  }

  /** Whether messages wait for the chat (an `enqueue` to a free chat then queues behind them). */
  async hasWaiting(chatId: number): Promise<boolean> {
    const [row] = await this.db.select({ id: queued.id }).from(queued).where(waitingIn(chatId)).limit(1);
    return row !== undefined;
  }

  /**
   * Stores a message for the chat: priority 0 behind the others (409 `queue_full` past
   * QUEUE_LIMIT), priority 1 (an interrupt) ahead of them. The chat's row is locked meanwhile, so
   * concurrent messages count right and an archive in progress drops it or refuses it (404).
   */
  async accept(
    ctx: ServiceContext,
    plan: TurnPlan,
    content: string,
    priority: 0 | 1,
  ): Promise<{ id: number; position: number }> {
    const { principal } = ctx;
    const chatId = plan.chat.id;
    const entry = await ctx.db.transaction(async (tx) => {
      const [chat] = await tx
        .select({ archivedAt: chats.archivedAt })
        .from(chats)
        .where(and(eq(chats.id, chatId), eq(chats.organizationId, principal.organizationId)))
        .for('update');
      if (!chat || chat.archivedAt !== null) throw notFound('Chat');
      if (priority === 0) {
        const [{ waiting }] = await tx
          .select({ waiting: count() })
          .from(queued)
          .where(and(waitingIn(chatId), eq(queued.priority, 0)));
        if (waiting >= QUEUE_LIMIT)
          throw conflict(
            `${QUEUE_LIMIT} messages already wait for this chat; send again once one has started`,
            'queue_full',
          );
      }
      const [row] = await tx
        .insert(queued)
        .values({
          organizationId: principal.organizationId,
          chatId,
          content,
          priority,
          principal: {
            kind: principal.kind,
            keyId: principal.keyId,
            userId: principal.userId,
            role: principal.role,
          },
        })
        .returning({ id: queued.id });
      return { id: row.id, position: await positionOf(tx, { id: row.id, chatId, priority }) };
    });
    this.watch(chatId);
    return entry;
  }

  /** GET /chats/:id/queue: the waiting messages, next first. */
  async list(ctx: ServiceContext, chatId: number): Promise<QueueEntryView[]> {
    const rows = await ctx.db
      .select({ id: queued.id, content: queued.content, createdAt: queued.createdAt })
      .from(queued)
      .where(and(waitingIn(chatId), eq(queued.organizationId, ctx.principal.organizationId)))
      .orderBy(...queueOrder);
    return rows.map((row, i) => ({
      message_id: row.id,
      content: row.content,
      position: i + 1,
      created_at: formatTimestamp(row.createdAt),
    }));
  }

  /** DELETE /chats/:id/queue/:message_id: 404 unless the message still waits. */
  async remove(ctx: ServiceContext, chatId: number, messageId: number): Promise<void> {
    const removed = await ctx.db
      .update(queued)
      .set({ status: 'removed' })
      .where(
        and(
          eq(queued.id, messageId),
          eq(queued.organizationId, ctx.principal.organizationId),
          waitingIn(chatId),
        ),
      )
      .returning({ id: queued.id });
    if (removed.length === 0) throw notFound('Queued message');
    this.announce(messageId);
  }

  /**
   * Waits until the queued message started or will never run, reading its state when notified and
   * every second. 'timeout' past `deadline` (epoch ms); 'aborted' once `signal` fired.
   */
  async follow(
    messageId: number,
    options: { deadline?: number; signal?: AbortSignal } = {},
  ): Promise<QueuedFate | 'timeout' | 'aborted' | 'closing'> {
    this.listen();
    for (;;) {
      if (this.closed) return 'closing';
      const [row] = await this.db
        .select({ status: queued.status, turnId: queued.turnId, error: queued.error })
        .from(queued)
        .where(eq(queued.id, messageId));
      const fate = this.fateOf(messageId, row);
      if (fate) return fate;
      if (this.closed) return 'closing';
      if (options.signal?.aborted) return 'aborted';
      const left = (options.deadline ?? Number.POSITIVE_INFINITY) - Date.now();
      if (left <= 0) return 'timeout';
      await this.nap(messageId, Math.min(FOLLOW_POLL_MS, left), options.signal);
    }
  }

  private fateOf(
    messageId: number,
    row: Pick<QueuedMessageRow, 'status' | 'turnId' | 'error'> | undefined,
  ): QueuedFate | null {
    if (!row) return { kind: 'refused', error: notFound('Queued message') };
    switch (row.status) {
      case 'queued':
        return null;
      case 'started':
        return { kind: 'started', turnId: row.turnId!, outcome: this.startedHere.get(messageId) ?? null };
      case 'removed':
        return {
          kind: 'refused',
          error: conflict('The message was removed from the queue before its turn started', 'dequeued'),
        };
      case 'dropped':
        return { kind: 'refused', error: notFound('Chat') };
      default: {
        const error = row.error ?? { status: 500, code: 'turn_failed', message: 'The turn could not start' };
        return { kind: 'refused', error: new ApiError(error.status, error.code, error.message) };
      }
    }
  }

  private nap(messageId: number, ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let set = this.waiters.get(messageId);
      if (!set) {
        set = new Set();
        this.waiters.set(messageId, set);
      }
      const waiters = set;
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        waiters.delete(done);
        if (waiters.size === 0) this.waiters.delete(messageId);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
      waiters.add(done);
    });
  }

  private wake(messageId: number): void {
    for (const waiter of [...(this.waiters.get(messageId) ?? [])]) waiter();
  }

  /** Wakes the message's waiting clients here and in the other processes. */
  private announce(messageId: number): void {
    this.wake(messageId);
    this.deps.streams.notifier
      .notify(QUEUE_CHANNEL, String(messageId))
      .catch((err) =>
        this.deps.log.warn({ err }, 'could not notify a queue change; waiting clients poll it'),
      );
  }

  private listen(): void {
    if (this.listening) return;
    this.listening = true;
    this.deps.streams.notifier
      .listen(QUEUE_CHANNEL, (payload) => this.wake(Number(payload)))
      .catch((err) =>
        this.deps.log.warn({ err }, 'could not listen for queue changes; waiting clients poll'),
      );
  }

  /** Starts the chat's next waiting messages in this process while the chat is free (never twice at once). */
  kick(chatId: number): void {
    if (this.closed) return;
    if (this.kicking.has(chatId)) {
      this.kickAgain.add(chatId);
      return;
    }
    const run = this.startNext(chatId)
      .catch((err) =>
        this.deps.log.error(
          { err, chat_id: chatId },
          'could not start a queued message; the queue sweep tries again',
        ),
      )
      .finally(() => {
        this.kicking.delete(chatId);
        if (this.kickAgain.delete(chatId)) this.kick(chatId);
      });
    this.kicking.set(chatId, run);
  }

  private async startNext(chatId: number): Promise<void> {
    while (!this.closed) {
      const [next] = await this.db
        .select()
        .from(queued)
        .where(waitingIn(chatId))
        .orderBy(...queueOrder)
        .limit(1);
      if (!next) return;
      const result = await this.start(next);
      if (result === 'busy') {
        this.watch(chatId);
        return;
      }
      if (result === 'started') return;
    }
  }

  /**
   * Begins the message's turn as the key that sent it (every check runs again: the chat, its
   * project and agent, the credits). A refusal other than a busy chat ends the message `failed`
   * with the answer its client gets; a server-side failure leaves it queued for the next try.
   */
  private async start(row: QueuedMessageRow): Promise<'started' | 'busy' | 'next'> {
    const ctx = serviceContext(
      this.deps.resources,
      { ...row.principal, organizationId: row.organizationId },
      this.deps.log.child({
        organization_id: row.organizationId,
        chat_id: row.chatId,
        queued_message_id: row.id,
      }),
    );
    try {
      if (!(await this.keyStillValid(row.principal.keyId)))
        throw new ApiError(403, 'invalid_api_key', 'Invalid or revoked API key');
      const plan = await prepareTurn(ctx, row.chatId);
      const turn = await this.deps.turns.begin(ctx, plan, row.content, {
        onLeased: async (tx, ids) => {
          const claimed = await tx
            .update(queued)
            .set({ status: 'started', turnId: ids.turnId, startedAt: sql`now()` })
            .where(and(eq(queued.id, row.id), eq(queued.status, 'queued')))
            .returning({ id: queued.id });
          if (claimed.length === 0) throw new ClaimLost();
        },
      });
      this.startedHere.set(row.id, turn.outcome);
      this.announce(row.id);
      void turn.outcome.then(() => {
        setTimeout(() => this.startedHere.delete(row.id), KEEP_OUTCOME_MS).unref();
        this.kick(row.chatId);
      });
      return 'started';
    } catch (err) {
      if (err instanceof ClaimLost) return 'next';
      const error = toApiError('v2', err);
      if (error.code === 'turn_in_progress') return 'busy';
      if (error.status >= 500) throw err;
      const failed = await this.db
        .update(queued)
        .set({ status: 'failed', error: { status: error.status, code: error.code, message: error.message } })
        .where(and(eq(queued.id, row.id), eq(queued.status, 'queued')))
        .returning({ id: queued.id });
      if (failed.length > 0) this.announce(row.id);
      return 'next';
    }
  }

  /** The key that queued a message may still act (as src/http/auth.ts checks a request's key). */
  private async keyStillValid(keyId: number): Promise<boolean> {
    const [key] = await this.db
      .select({ id: apiKeys.id })
      .from(apiKeys)
      .leftJoin(organizations, eq(organizations.id, apiKeys.organizationId))
      .leftJoin(users, eq(users.id, apiKeys.userId))
      .where(
        and(
          eq(apiKeys.id, keyId),
          isNull(apiKeys.revokedAt),
          or(isNull(apiKeys.organizationId), eq(organizations.active, true)),
          or(isNull(apiKeys.userId), isNull(users.deletedAt)),
        ),
      );
    return key !== undefined;
  }

  /**
   * Follows the chat's running turn and starts the queue once it ended. A turn known dead (its
   * process stopped) or whose stream ended while it still holds the lease is left to the sweep,
   * which starts the queue once the lease is released or ran out.
   */
  private watch(chatId: number): void {
    if (this.closed || this.watched.has(chatId)) return;
    this.watched.set(chatId, () => {});
    this.watchTurn(chatId).catch((err) => {
      this.watched.delete(chatId);
      this.deps.log.warn(
        { err, chat_id: chatId },
        'could not follow the running turn; the queue sweep starts the queue',
      );
    });
  }

  private async watchTurn(chatId: number): Promise<void> {
    const { streams, turns } = this.deps;
    const [turn] = await this.db
      .select({ id: chatTurns.id })
      .from(chatTurns)
      .where(and(eq(chatTurns.chatId, chatId), eq(chatTurns.status, 'running')))
      .limit(1);
    if (!turn) {
      this.watched.delete(chatId);
      this.kick(chatId);
      return;
    }
    const key = turnStreamKey(turn.id);
    const state = await streams.describe(key);
    if (state?.ended || (await turns.isDead(turn.id)) || this.closed) {
      this.watched.delete(chatId);
      return;
    }
    let ended = false;
    const unsubscribe = streams.subscribe(
      key,
      state?.lastSeq ?? 0,
      {
        onEvent: () => {},
        onEnd: (reason) => {
          if (ended) return;
          ended = true;
          this.watched.delete(chatId);
          if (reason === 'ended') this.kick(chatId);
        },
      },
      { abandoned: () => turns.isDead(turn.id) },
    );
    if (ended) return;
    this.watched.set(chatId, () => {
      ended = true;
      unsubscribe();
    });
  }

  /**
   * The repeated job (every process): starts the queue of every chat whose messages wait while no
   * live turn holds it, e.g. after the accepting process died or a turn's lease ran out.
   */
  async sweep(): Promise<void> {
    if (this.closed) return;
    const { rows } = await this.deps.resources.database.query<{ chat_id: number }>(
      `select distinct q.chat_id from chat_queued_messages q
        where q.status = 'queued' and not exists (
          select 1 from chat_turns t
          where t.chat_id = q.chat_id and t.status = 'running' and t.lease_expires_at > now())
        limit 100`,
    );
    for (const row of rows) this.kick(Number(row.chat_id));
    await Promise.allSettled([...this.kicking.values()]);
  }

  /**
   * Stops starting turns (the process is stopping; called before the HTTP server waits for its
   * connections): queued messages wait for another process, or this one once restarted, and the
   * clients waiting here are answered at once (`follow` gives 'closing').
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const stop of this.watched.values()) stop();
    this.watched.clear();
    for (const messageId of [...this.waiters.keys()]) this.wake(messageId);
    await Promise.allSettled([...this.kicking.values()]);
  }
}

/**
 * The reply of a turn started in any process, read from its stream: its `done` message, or its
 * `error` as an ApiError. 'timeout' past `deadline` (epoch ms).
 */
export function awaitTurnReply(
  streams: StreamHub,
  turns: TurnRunner,
  turnId: number,
  deadline: number,
): Promise<MessageView | 'timeout'> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let unsubscribe: (() => void) | null = null;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      unsubscribe?.();
      fn();
    };
    const timer = setTimeout(() => settle(() => resolve('timeout')), Math.max(0, deadline - Date.now()));
    unsubscribe = streams.subscribe(
      turnStreamKey(turnId),
      0,
      {
        onEvent: (stored) => {
          const event = asTurnEvent(stored);
          if (event.name === 'done') settle(() => resolve(event.data.message));
          else if (event.name === 'error')
            settle(() => reject(new ApiError(event.data.code, 'turn_failed', event.data.message)));
        },
        onEnd: (reason) => {
          if (reason === 'ended') return;
          settle(() =>
            reject(
              reason === 'lost'
                ? new ApiError(500, 'turn_interrupted', TURN_INTERRUPTED_MESSAGE)
                : new ApiError(503, 'shutting_down', 'This server is shutting down; the turn goes on'),
            ),
          );
        },
      },
      { abandoned: () => turns.isDead(turnId) },
    );
    if (settled) unsubscribe();
  });
}
