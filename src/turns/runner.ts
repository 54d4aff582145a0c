import { setTimeout as sleep } from 'node:timers/promises';
import { type ModelMessage, stepCountIs, streamText } from 'ai';
import type { FastifyBaseLogger } from 'fastify';
import type { ServiceContext } from '../core/context.js';
import type { OrgPrincipal } from '../core/principal.js';
import type { Database, Queryable } from '../db/client.js';
import type { AgentTool } from '../db/schema/index.js';
import { ApiError, notFound, paymentRequired } from '../http/errors.js';
import { DEFAULT_RETRY_POLICY, withBoundedRetries } from '../llm/bounded-retries.js';
import {
  type EarlyRequest,
  streamLean,
  type TurnModelStream,
  type TurnStreamPart,
} from '../llm/lean-client.js';
import { type SpeculationOutcome, SpeculativeRequests } from '../llm/speculative-requests.js';
import { collectTools, type ToolFamilies, type ToolScope } from '../llm/tools/registry.js';
import { storeAttachments } from '../modules/chats/attachments.js';
import { presentMessage } from '../modules/chats/presenter.js';
import type { ChatView, MessageView } from '../modules/chats/schemas.js';
import { checkPlan, messageView, titleFrom } from '../modules/chats/service.js';
import { ensureCredits, type Usage } from '../modules/credits/service.js';
import { provideIntegrations } from '../modules/integrations/service.js';
import { ContentCoalescer } from '../streams/coalescer.js';
import { chatDone, chatFailure, type TurnEvent } from '../streams/protocol.js';
import { StreamPublisher } from '../streams/publisher.js';
import type { StreamHub } from '../streams/stream-hub.js';
import type { TurnOutcomeLabel } from '../telemetry/metrics.js';
import { genAiModel, type SpanHandle, traceModel, traceTools, withSpan } from '../telemetry/tracing.js';
import { TurnTiming } from '../telemetry/turn-timing.js';
import { TurnAdditions, type TurnAdditionsInput } from './additions.js';
import { ApprovalGate, ApprovalWaits, withApprovals } from './approvals.js';
import { turnStreamKey } from './events.js';
import { describeFailure, TURN_INTERRUPTED_MESSAGE, TurnCancelled, TurnFailure } from './failure.js';
import { type TurnEnd, writeTurnEnd } from './finish.js';
import { keepLeaseAlive } from './lease.js';
import { turnHistory } from './model-input.js';
import type { TurnPlan } from './plan.js';
import { buildSystemPrompt, expandSlashCommand, skillsOfAgent } from './system-prompt.js';
import { asParameters, recordToolExecution } from './tool-executions.js';
import { type OpenedTurn, openTurn } from './turn-open.js';
import { insertTurnRows, startTurnAtOnce, type TurnRows, type TurnRowsInput } from './turn-start.js';
import { insertRegenerationRows } from './versions.js';
import { IdleWatchdog, pausingWatchdog } from './watchdog.js';

export type { TurnPlan } from './plan.js';

/**
 * How long after a turn's end its stream may still lack its last event before readers stop
 * waiting: the last event is stored within milliseconds of the end (StreamHub's finalFlushMs and
 * a flush), so seconds leave room for a slow database without keeping readers a lease's length.
 */
const ORPHANED_AFTER_S = 5;

export interface TurnSettings {
  /** How long a turn's lease lasts without renewal (it is renewed every third of it). */
  leaseMs: number;
  /** A model silent this long (no stream part, no tool running) fails the turn. */
  modelIdleMs: number;
  /** Model calls per turn, tool round trips included. */
  maxSteps: number;
  /** Retries of a provider's 429 and 5xx answers per model call (short waits: llm/bounded-retries.ts). */
  maxRetries: number;
  /** Finished messages of the chat sent to the model as context. */
  historyLimit: number;
  /** A chat's next model request may go before its turn's statement answers (llm/speculative-requests.ts). */
  earlyRequests: boolean;
}

export const DEFAULT_TURN_SETTINGS: TurnSettings = {
  leaseMs: 60_000,
  modelIdleMs: 120_000,
  maxSteps: 8,
  maxRetries: 2,
  historyLimit: 100,
  earlyRequests: true,
};

/** Tools of a chat without an agent: the project's knowledge and its connected tool servers. */
export const DEFAULT_CHAT_TOOLS: AgentTool[] = ['knowledge', 'integrations'];

/** `completed` also covers a reply stopped by a cancel request (its message has `cancelled: true`). */
export type TurnOutcome = (
  | { status: 'completed'; message: MessageView }
  | { status: 'failed'; error: ApiError }
) & { timing: TurnTiming };

export interface StartedTurn {
  turnId: number;
  userMessageId: number;
  assistantMessageId: number;
  /** Settles when the turn has written its result and published its last event; never rejects. */
  outcome: Promise<TurnOutcome>;
  /** The turn's timing so far (a reply paused for tool approvals shows it too). */
  timing: TurnTiming;
}

export interface TurnOptions {
  /** On POST /chats: the new chat, added to the `done` and `error` events (spec 6.1). */
  announceChat?: ChatView;
  /** When the request arrived (`requestArrival`), so the turn's timing counts from it. */
  arrivedAt?: number;
  /** Issue 18: structured output, regeneration, attachments (additions.ts). */
  additions?: TurnAdditionsInput;
  /**
   * Runs in the transaction that takes the chat's lease, after it (src/turns/queue.ts marks its
   * queued message started there); throwing rolls the turn back.
   */
  onLeased?: (tx: Queryable, ids: { turnId: number; userMessageId: number }) => Promise<void>;
}

/** What the turn's opening statement read for the model request (turn-open.ts). */
type KnownInput = Pick<NonNullable<OpenedTurn['started']>, 'history' | 'integrations' | 'skills'> & {
  /** The model request sent before the statement answered, if any. */
  early?: EarlyRequest | null;
};

/** How long a failed turn's end is retried while the database does not answer. */
const RECORD_RETRY_MS = 10 * 60_000;

/**
 * No early model request when `turn_open` would follow this many unanswered statements on its
 * pipelined connection. A statement counts as unanswered until this process has read its answer, so
 * at C=500 each connection has one to three without any queue in PostgreSQL; at 1 (every
 * connection busy) two fifths of the turns there sent nothing early (docs/decisions.md, "Turn
 * statements on pipelined connections").
 */
const EARLY_REQUEST_MAX_QUEUE = 4;

/** Turns waiting for tool approvals do not get the shutdown's grace period: nobody may answer within it. */
const SHUT_DOWN_WAITING = new TurnFailure(
  'The server shut down while the reply waited for a tool approval',
  'turn_cancelled',
  true,
);

/** Cancel requests for turns running in another process arrive on this channel (payload: the turn id). */
export const TURN_CANCEL_CHANNEL = 'scriptorium_turn_cancels';

/**
 * Runs chat turns detached from HTTP requests: a turn writes every result to the database and
 * publishes numbered events, so a client that disconnects changes nothing.
 */
export class TurnRunner {
  private readonly inFlight = new Set<Promise<TurnOutcome>>();
  private readonly shutdown = new AbortController();
  /** Turns running in this process, by id: how to stop each one. */
  private readonly running = new Map<number, AbortController>();
  /** Ends of failed turns that could not be written yet (the database was away), retried. */
  private readonly recordings = new Set<Promise<void>>();
  private listeningForCancels = false;
  /** Tool calls of this process's turns waiting for approval decisions (src/turns/approvals.ts). */
  readonly approvals: ApprovalWaits;
  /** Chats' next model requests, sent before the turn's statement answers (llm/speculative-requests.ts). */
  private readonly early: SpeculativeRequests;

  constructor(
    private readonly deps: {
      database: Database;
      /** Where turns publish their numbered events; its notifier also carries cancel requests between processes. */
      streams: StreamHub;
      families: ToolFamilies;
      settings: TurnSettings;
      log: FastifyBaseLogger;
      /** Counts the early model requests' outcomes (the process's metrics). */
      countEarlyRequest?: (outcome: SpeculationOutcome) => void;
    },
  ) {
    // Off (EARLY_MODEL_REQUESTS=false): no payload is kept, so nothing is ever sent early.
    this.early = new SpeculativeRequests(deps.countEarlyRequest, deps.settings.earlyRequests ? undefined : 0);
    this.approvals = new ApprovalWaits(deps.streams.notifier, deps.log);
  }

  /** A chat created without a message: its first may find its model request ready (speculative-requests.ts). */
  created(principal: OrgPrincipal, chat: ChatView): void {
    this.early.created(chat.id, principal, {
      projectId: chat.project_id,
      agentId: chat.agent_id,
      modelConfigurationId: chat.model_configuration_id,
    });
  }

  get settings(): TurnSettings {
    return this.deps.settings;
  }

  /**
   * Whether a turn stopped without ending: retired by another turn (`expired`), its lease run out,
   * or, on PGlite (one process holds the database), still `running` from before this process
   * opened it, so left behind by a previous one. Readers of such a turn end with an `error` event.
   */
  async isDead(turnId: number): Promise<boolean> {
    if (this.running.has(turnId)) return false;
    const { database } = this.deps;
    const { rows } = await database.query<{ status: string; expired: boolean; inherited: boolean }>(
      'select status, lease_expires_at < now() as expired, created_at < $2 as inherited from chat_turns where id = $1',
      [turnId, database.openedAt],
    );
    const turn = rows[0];
    if (!turn) return false;
    if (turn.status === 'expired') return true;
    if (turn.status !== 'running') return false;
    return turn.expired || (database.kind === 'pglite' && turn.inherited);
  }

  /**
   * Whether a reader of the turn's stream should stop waiting for its publisher (StreamHub asks
   * only while the stream lacks its last event): the turn is dead (isDead), or it ended more than
   * ORPHANED_AFTER_S ago. The second is a process that stopped between writing the turn's end and
   * storing its last event (the hub stores a final event up to `finalFlushMs` later to share a
   * write); its readers end with the recorded reply (recordedReply) instead of waiting for the
   * stream's liveness to lapse.
   */
  async isOrphaned(turnId: number): Promise<boolean> {
    if (this.running.has(turnId)) return false;
    if (await this.isDead(turnId)) return true;
    const { rows } = await this.deps.database.query<{ stale: boolean }>(
      `select finished_at < now() - make_interval(secs => ${ORPHANED_AFTER_S}) as stale from chat_turns where id = $1`,
      [turnId],
    );
    return rows[0]?.stale === true;
  }

  /** The reply of a turn that ended with one (completed or cancelled); null otherwise. */
  async recordedReply(turnId: number): Promise<MessageView | null> {
    const { database } = this.deps;
    const { rows } = await database.query<{ message_id: number | null }>(
      `select assistant_message_id as message_id from chat_turns where id = $1 and status in ('completed', 'cancelled')`,
      [turnId],
    );
    const messageId = rows[0]?.message_id;
    if (messageId === undefined || messageId === null) return null;
    const message = await messageView(database.db, messageId);
    return message.status === 'failed' ? null : message;
  }

  /** Stops a turn running in this process (its partial reply is kept); false when it runs elsewhere. */
  cancel(turnId: number): boolean {
    const abort = this.running.get(turnId);
    if (!abort) return false;
    if (!abort.signal.aborted) abort.abort(new TurnCancelled());
    return true;
  }

  /**
   * Stops the turn here, or tells the other processes to (the lease renewal is the fallback).
   * True when the turn runs in this process.
   */
  async cancelAnywhere(turnId: number): Promise<boolean> {
    if (this.cancel(turnId)) return true;
    await this.deps.streams.notifier
      .notify(TURN_CANCEL_CHANNEL, String(turnId))
      .catch((err) =>
        this.deps.log.warn({ err }, 'could not notify the cancel; the lease renewal picks it up'),
      );
    return false;
  }

  /**
   * Accepts a turn: credits (402), the chat's lease (409), then the user message and an assistant
   * message in `generating` state, all or nothing (one statement, or a transaction). The reply
   * then runs on its own.
   */
  begin(
    ctx: ServiceContext,
    plan: TurnPlan,
    content: string,
    options: TurnOptions = {},
  ): Promise<StartedTurn> {
    return this.beginWith(ctx, plan, content, options, new TurnTiming(options.arrivedAt), true);
  }

  /**
   * A plain message to an existing chat (no attachments, no slash command, not queued, not a
   * regeneration): its plan, the credits, both messages, the lease, the history and the project's
   * tool servers in one statement (turn-open.ts), so the model request follows one round trip.
   * The plan's refusals throw here (the caller's HTTP errors, as prepareTurn's); `start` gives the
   * running turn or throws the start's own refusals (402; 409 after the long way), which a
   * streamed request sends as `error` events (spec 6.1).
   */
  async open(
    ctx: ServiceContext,
    chatId: number,
    content: string,
    options: TurnOptions = {},
  ): Promise<{ plan: TurnPlan; start: () => Promise<StartedTurn> }> {
    const { database, settings } = this.deps;
    const timing = new TurnTiming(options.arrivedAt);
    // Sent now when this process knows the chat's next request; used only if the statement's reads
    // build the same payload (llm/speculative-requests.ts), dropped on any refusal. Not when the
    // statement will queue behind others: the model's reply would then wait in this process while
    // the client sees nothing, rather than stream as it comes after the wait.
    const queued = (database.pipelined?.queueDepth ?? 0) >= EARLY_REQUEST_MAX_QUEUE;
    const early = queued ? null : this.early.send(chatId, ctx.principal, content);
    const opened = await timing
      .db(
        openTurn(database, ctx.principal, chatId, {
          content,
          title: titleFrom(content),
          leaseMs: settings.leaseMs,
          historyLimit: settings.historyLimit,
        }),
      )
      .catch((err: unknown) => {
        early?.drop();
        throw err;
      });
    // Refused, or the long way (a taken lease): its request, if any, is built and sent there.
    if (!opened?.started) early?.drop();
    if (!opened) throw notFound('Chat');
    // The statement wrote only if these checks pass (its `usable`), so a refusal here wrote nothing.
    const plan = checkPlan(opened.plan);
    const start = async (): Promise<StartedTurn> => {
      if (opened.started)
        return this.launch(ctx, plan, opened.started.ids, options, timing, { ...opened.started, early });
      if (!opened.usable) return this.beginWith(ctx, plan, content, options, timing, true);
      if (!opened.funded) throw paymentRequired();
      // The chat's lease is taken: a dead turn to retire, or a live one (409).
      return this.beginWith(ctx, plan, content, options, timing, false);
    };
    return { plan, start };
  }

  private async beginWith(
    ctx: ServiceContext,
    plan: TurnPlan,
    content: string,
    options: TurnOptions,
    timing: TurnTiming,
    mayStartAtOnce: boolean,
  ): Promise<StartedTurn> {
    const { principal } = ctx;
    const { database } = this.deps;
    const { db } = database;
    const { regenerate, attachments } = options.additions ?? {};
    // A plain message starts in one statement that checks the credits itself (turn-start.ts).
    const atOnce = !regenerate && !attachments?.length && !options.onLeased;
    // Both are reads (the slash command's only for a message starting with `/`); waiting for them
    // together keeps one round trip off the first token. The 402 still comes before anything is written.
    const [credits, slash] = await timing.db(
      Promise.allSettled([
        atOnce ? null : ensureCredits(db, principal.organizationId),
        expandSlashCommand(db, principal.organizationId, content),
      ]),
    );
    if (credits.status === 'rejected') throw credits.reason;
    if (slash.status === 'rejected') throw slash.reason;
    const skill = slash.value;
    const input = {
      organizationId: principal.organizationId,
      projectId: plan.project.id,
      chatId: plan.chat.id,
      leaseMs: this.deps.settings.leaseMs,
      content,
      prompt: skill?.prompt ?? null,
      model: plan.configuration.model,
      modelConfigurationId: plan.configuration.id,
      title: titleFrom(content),
    };
    const quick = atOnce && mayStartAtOnce ? await timing.db(startTurnAtOnce(database, input)) : 'busy';
    if (quick === 'unfunded') throw paymentRequired();
    // `busy`: the chat's lease is taken (a dead turn to retire, or a 409); or the turn writes more.
    const ids = quick !== 'busy' ? quick : await timing.db(this.startInTransaction(input, options));
    return this.launch(ctx, plan, ids, options, timing, null);
  }

  /** Runs a started turn (its rows written, its lease held) on its own. */
  private launch(
    ctx: ServiceContext,
    plan: TurnPlan,
    ids: TurnRows,
    options: TurnOptions,
    timing: TurnTiming,
    known: KnownInput | null,
  ): StartedTurn {
    timing.started();
    this.early.forget(plan.chat.id);
    const abort = new AbortController();
    this.running.set(ids.turnId, abort);
    this.listenForCancels();
    const outcome = withSpan(
      `invoke_agent ${plan.agent?.name ?? 'chat'}`,
      {
        'gen_ai.operation.name': 'invoke_agent',
        ...genAiModel(plan.configuration.provider, plan.configuration.model),
        'gen_ai.conversation.id': String(plan.chat.id),
        ...(plan.agent
          ? { 'gen_ai.agent.id': String(plan.agent.id), 'gen_ai.agent.name': plan.agent.name }
          : {}),
        'scriptorium.turn.id': ids.turnId,
      },
      (span) => this.run(ctx, plan, ids, options, abort, timing, span, known),
    );
    this.inFlight.add(outcome);
    void outcome.finally(() => {
      this.inFlight.delete(outcome);
      this.running.delete(ids.turnId);
    });
    return { ...ids, outcome, timing };
  }

  /**
   * Both messages, the lease pointing at them and the chat's title in one statement (turn-start.ts),
   * with what else the turn writes, in one transaction; a refused lease (409) rolls it all back.
   */
  private startInTransaction(input: TurnRowsInput, options: TurnOptions): Promise<TurnRows> {
    const { regenerate, attachments } = options.additions ?? {};
    return this.deps.database.db.transaction(async (tx) => {
      // Issue 18: a regeneration adds only a reply (versions.ts); a message's attachments are
      // stored with it (chats/attachments.ts).
      const rows = regenerate
        ? await insertRegenerationRows(tx, input, regenerate)
        : await insertTurnRows(tx, input);
      const target = {
        organizationId: input.organizationId,
        chatId: input.chatId,
        messageId: rows.userMessageId,
      };
      if (!regenerate) await storeAttachments(tx, target, attachments);
      // A queued message's turn (queue.ts) is marked started in the lease's transaction: it runs once.
      await options.onLeased?.(tx, { turnId: rows.turnId, userMessageId: rows.userMessageId });
      return rows;
    });
  }

  private listenForCancels() {
    const { streams, log } = this.deps;
    const { notifier } = streams;
    if (this.listeningForCancels) return;
    this.listeningForCancels = true;
    notifier
      .listen(TURN_CANCEL_CHANNEL, (payload) => {
        this.cancel(Number(payload));
      })
      .catch((err) => log.warn({ err }, 'could not listen for cancel requests; lease renewals check them'));
  }

  /**
   * Lets running turns (and failed turns still waiting to be recorded) finish for up to `graceMs`,
   * then cancels the rest and waits for them to record it. Records still pending then are left
   * to the lease's expiry.
   */
  async close(graceMs = 0): Promise<void> {
    this.approvals.stopAll(SHUT_DOWN_WAITING);
    const pending = () => [...this.inFlight, ...this.recordings];
    if (pending().length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([Promise.allSettled(pending()), graceOver]);
    clearTimeout(timer);
    if (pending().length === 0) return;
    const reason = new TurnFailure('The server shut down before the reply finished', 'turn_cancelled', true);
    this.shutdown.abort(reason);
    // Each running turn is stopped from here, not by a listener of its own on the shutdown signal:
    // an EventTarget looks for duplicates through its whole list on every add and remove, which
    // at 500 concurrent turns cost each turn a walk of hundreds of listeners twice (issue 14).
    for (const abort of this.running.values()) abort.abort(reason);
    await Promise.allSettled(pending());
  }

  /**
   * Retries writing a turn's end until it is written: every 100 ms at first, then every second
   * (so a chat is free within about a second of the database answering again), for at most
   * RECORD_RETRY_MS, and not past the shutdown.
   */
  private recordLater(write: () => Promise<unknown>, log: FastifyBaseLogger): void {
    const signal = this.shutdown.signal;
    const task = (async () => {
      const giveUpAt = Date.now() + RECORD_RETRY_MS;
      let delay = 100;
      let lastError: unknown = null;
      while (!signal.aborted && Date.now() < giveUpAt) {
        try {
          await sleep(delay, undefined, { signal });
        } catch {
          break;
        }
        try {
          await write();
          log.info('recorded the failed turn once the database answered again');
          return;
        } catch (err) {
          lastError = err;
          delay = Math.min(delay * 2, 1000);
        }
      }
      log.error(
        { err: lastError },
        'gave up recording the failed turn; its chat is free again when the lease expires',
      );
    })();
    this.recordings.add(task);
    void task.finally(() => this.recordings.delete(task));
  }

  private async run(
    ctx: ServiceContext,
    plan: TurnPlan,
    ids: { turnId: number; userMessageId: number; assistantMessageId: number },
    options: TurnOptions,
    abort: AbortController,
    timing: TurnTiming,
    span: SpanHandle,
    known: KnownInput | null,
  ): Promise<TurnOutcome> {
    const { database, settings, streams } = this.deps;
    const db = database.db;
    // The turn's logger, made when first used: most turns log nothing, and pino serializes a
    // child's bindings when it is made (a string per turn that outlived the young generation).
    let turnLog: FastifyBaseLogger | null = null;
    const log = () =>
      (turnLog ??= ctx.log.child({
        organization_id: ctx.principal.organizationId,
        project_id: plan.chat.projectId,
        chat_id: plan.chat.id,
        turn_id: ids.turnId,
      }));
    const publisher = new StreamPublisher<TurnEvent>(streams, turnStreamKey(ids.turnId));
    let approvals: ApprovalGate | null = null;
    const publishNow = (event: TurnEvent) =>
      publisher.publish(event).then(
        () => timing.eventWritten(),
        (err) => log().error({ err, event: event.name }, 'could not publish a turn event'),
      );
    // Text deltas merge while the process is busy (streams/coalescer.ts); any other event first
    // publishes what is merged, so the order stays the model's.
    const content = new ContentCoalescer(
      (text) => void publishNow({ name: 'content', data: { content: text } }),
    );
    const publish = (event: TurnEvent) => {
      content.flush();
      const published = publishNow(event);
      approvals?.observe(event);
      return published;
    };
    // Set once the turn writes its own end: a renewal queued behind that write (a busy pool) then
    // finds the turn released by this very process, which is not a lost lease.
    let finishing = false;
    const stopLease = keepLeaseAlive(db, ids.turnId, settings.leaseMs, {
      onError: (err) => log().warn({ err }, 'could not renew the turn lease'),
      onCancelRequested: () => this.cancel(ids.turnId),
      // Retired elsewhere (a cancel that got no answer, or an expired lease): stop; its record stands.
      onLost: () => {
        if (finishing) return;
        log().warn('the turn is no longer this process’s to run: stopping it');
        this.cancel(ids.turnId);
      },
    });
    const watchdog = new IdleWatchdog(settings.modelIdleMs, () =>
      abort.abort(
        new TurnFailure(
          `The model did not respond for ${Math.round(settings.modelIdleMs / 1000)} s`,
          'model_timeout',
        ),
      ),
    );
    if (plan.agent && plan.agent.toolsRequiringApproval.length > 0) {
      approvals = new ApprovalGate({
        db,
        waits: this.approvals,
        turn: {
          ...ids,
          messageId: ids.assistantMessageId,
          organizationId: ctx.principal.organizationId,
          projectId: plan.project.id,
          chatId: plan.chat.id,
        },
        list: plan.agent.toolsRequiringApproval,
        timeoutMs: ctx.config.approvalTimeoutMs,
        publish,
        signal: abort.signal,
        stopTurn: (reason) => abort.abort(reason),
        watchdog,
      });
    }

    const additions = new TurnAdditions(options.additions ?? {});
    let annotations = {};
    let text = '';
    let usedTools = false;
    const finishReasons: string[] = [];
    const usage: Usage = { inputTokens: 0, outputTokens: 0 };
    const { provider, model } = plan.configuration;
    // The one place a turn's result is written, however it ended.
    const finish = async (end: TurnEnd) => {
      finishing = true;
      const row = await timing.db(
        writeTurnEnd(
          database,
          {
            ...ids,
            chatId: plan.chat.id,
            projectId: plan.project.id,
            text,
            annotations,
            usage,
            charge: this.chargeOf(ctx, plan, ids.assistantMessageId),
            end,
          },
          { regeneration: options.additions?.regenerate !== undefined },
        ),
      );
      timing.ended();
      if (row) ctx.metrics.countUsage(provider, model, usage, Number(row.credits));
      span.setAttributes({
        'gen_ai.usage.input_tokens': usage.inputTokens,
        'gen_ai.usage.output_tokens': usage.outputTokens,
        'gen_ai.response.finish_reasons': finishReasons,
        'scriptorium.turn.outcome': end.kind,
      });
      return row;
    };
    const observe = (outcome: TurnOutcomeLabel) => ctx.metrics.observeTurn(provider, outcome, timing.view());
    // The turn's end was written by someone else (see finishTurn): this process's readers get
    // what was recorded, so every reader of the turn ends the same way.
    const endRecordedElsewhere = async (): Promise<TurnOutcome> => {
      const message = await messageView(db, ids.assistantMessageId);
      if (message.status !== 'failed') {
        await publish(chatDone(message, options.announceChat));
        return { status: 'completed', message, timing };
      }
      const error = new ApiError(500, 'turn_interrupted', TURN_INTERRUPTED_MESSAGE);
      await publish(chatFailure(error, options.announceChat));
      return { status: 'failed', error, timing };
    };
    try {
      const stream = await this.startModel(
        ctx,
        plan,
        abort.signal,
        watchdog,
        timing,
        approvals,
        additions,
        known,
      );
      let failure: unknown = null;
      try {
        for await (const part of stream.fullStream) {
          watchdog.touch();
          if (part.type === 'text-delta') {
            if (!part.text) continue;
            timing.modelChunk();
            text += part.text;
            if (!additions.holdsText) content.push(part.text);
          } else if (part.type === 'tool-call') {
            timing.modelChunk();
            await publish({
              name: 'tool_start',
              data: {
                tool_call_id: part.toolCallId,
                tool_name: part.toolName,
                parameters: asParameters(part.input),
              },
            });
          } else if (part.type === 'tool-result' || part.type === 'tool-error') {
            if (part.type === 'tool-result' && part.preliminary) continue;
            usedTools = true;
            const data = await timing.db(
              recordToolExecution(db, {
                organizationId: ctx.principal.organizationId,
                messageId: ids.assistantMessageId,
                part,
                executionTimeMs: watchdog.takeToolTime(part.toolCallId),
              }),
            );
            await publish({ name: 'tool_result', data });
          } else if (part.type === 'finish-step') {
            finishReasons.push(part.finishReason);
            usage.inputTokens += part.usage.inputTokens ?? 0;
            usage.outputTokens += part.usage.outputTokens ?? 0;
          } else if (part.type === 'error') {
            failure = part.error;
            break;
          } else if (part.type === 'abort') {
            failure = abort.signal.reason ?? new TurnFailure('The reply was aborted', 'model_error');
            break;
          }
        }
      } catch (err) {
        failure = abort.signal.aborted ? abort.signal.reason : err;
      }
      timing.modelEnded();
      if (failure !== null) throw failure;
      if (abort.signal.aborted) throw abort.signal.reason;
      const total = await Promise.resolve(stream.totalUsage).catch(() => null);
      if (total) {
        usage.inputTokens = total.inputTokens ?? usage.inputTokens;
        usage.outputTokens = total.outputTokens ?? usage.outputTokens;
      }
      ({ text, annotations } = await additions.settle(text, usage, {
        db,
        organizationId: ctx.principal.organizationId,
        repairModel: () => ctx.models.languageModel(plan.configuration),
        signal: abort.signal,
      }));
      if (additions.holdsText && text) await publish({ name: 'content', data: { content: text } });

      const row = await finish({ kind: 'completed' });
      if (!row) return await endRecordedElsewhere();
      const sent = stream.firstRequest;
      // The chat's next request, when this one's messages and reply are all of it (speculative-requests.ts).
      if (sent && !usedTools && finishReasons.length === 1 && additions.plain)
        this.early.remember(
          plan.chat.id,
          ctx.principal,
          {
            projectId: plan.project.id,
            agentId: plan.agent?.id ?? null,
            modelConfigurationId: plan.configuration.id,
          },
          sent,
          text,
          settings.historyLimit,
        );
      // The stored row is at hand: read it back only when tool executions belong in the view.
      const stored = usedTools ? await messageView(db, ids.assistantMessageId) : presentMessage(row);
      const message: MessageView = { ...stored, timing: timing.view() };
      observe('completed');
      await publish(chatDone(message, options.announceChat));
      return { status: 'completed', message, timing };
    } catch (err) {
      const failure = describeFailure(err);
      if (failure instanceof TurnCancelled) {
        const recorded: MessageView | 'elsewhere' | null = await finish({ kind: 'cancelled' }).then(
          async (row) =>
            row ? { ...(await messageView(db, ids.assistantMessageId)), timing: timing.view() } : 'elsewhere',
          (recordErr) => {
            log().error({ err: recordErr }, 'could not record the cancelled turn');
            return null;
          },
        );
        if (recorded === 'elsewhere') return await endRecordedElsewhere();
        if (recorded) {
          log().info('chat turn cancelled by request');
          observe('cancelled');
          await publish(chatDone(recorded, options.announceChat));
          return { status: 'completed', message: recorded, timing };
        }
      }
      log()[failure.cancelled ? 'warn' : 'error']({ err }, 'chat turn failed');
      const recorded = await finish({ kind: 'failed', failure }).then(
        () => true,
        (recordErr) => {
          log().warn(
            { err: recordErr },
            'could not record the failed turn; retrying until the database answers',
          );
          return false;
        },
      );
      timing.ended();
      observe('failed');
      span.setAttributes({ 'error.type': failure.code, 'scriptorium.turn.outcome': 'failed' });
      const error = new ApiError(500, failure.code, failure.message);
      await publish(chatFailure(error, options.announceChat));
      // The database is away (that is usually why the record failed): this process knows the turn
      // is over, so it frees the chat as soon as the database answers instead of leaving it to the
      // lease's expiry, and the messages show the real failure with the partial reply.
      if (!recorded) this.recordLater(() => finish({ kind: 'failed', failure }), log());
      return { status: 'failed', error, timing };
    } finally {
      known?.early?.drop();
      watchdog.stop();
      stopLease();
    }
  }

  private async startModel(
    ctx: ServiceContext,
    plan: TurnPlan,
    signal: AbortSignal,
    watchdog: IdleWatchdog,
    timing: TurnTiming,
    approvals: ApprovalGate | null,
    additions: TurnAdditions,
    known: KnownInput | null,
  ): Promise<TurnModelStream> {
    const { database, families, settings } = this.deps;
    const db = database.db;
    const { provider, model: modelName } = plan.configuration;
    const retry = { ...DEFAULT_RETRY_POLICY, retries: settings.maxRetries };
    const scope: ToolScope = {
      ctx,
      projectId: plan.project.id,
      chatId: plan.chat.id,
      agentId: plan.agent?.id ?? null,
      signal,
    };
    // Read with the turn's start (turn-open.ts), or now.
    if (known) provideIntegrations(ctx, plan.project.id, known.integrations);
    // Independent reads on the way to the first token: waited for together.
    const [toolSet, skills, history] = await Promise.all([
      collectTools(families, plan.agent ? plan.agent.tools : DEFAULT_CHAT_TOOLS, scope),
      plan.agent ? (known?.skills ?? timing.db(skillsOfAgent(db, plan.agent.id))) : [],
      known?.history ?? timing.db(turnHistory(db, plan.chat.id, settings.historyLimit)),
    ]);
    // The approval gate is outermost: a call waiting for a person is neither run time nor a tool span.
    // The tools first: the system prompt asks for citations when knowledge_search is among them.
    const tools = withApprovals(
      approvals,
      traceTools(pausingWatchdog(additions.tools(toolSet.tools), watchdog)),
    );
    const system = additions.system(
      buildSystemPrompt({ project: plan.project, agent: plan.agent, skills, toolNotes: toolSet.notes }),
    );
    const messages: ModelMessage[] = await additions.modelMessages(db, history);
    // OpenAI Chat Completions providers take the lean client; others the AI SDK (docs/decisions.md),
    // and so do turns with a schema or attachments (the lean client sends text only).
    const lean = additions.needsSdk(messages) ? null : ctx.models.leanModel(plan.configuration);
    // Only the lean client takes a request sent early; the AI SDK sends its own.
    if (!lean) known?.early?.drop();
    const model = lean
      ? null
      : withBoundedRetries(
          traceModel(additions.model(ctx.models.languageModel(plan.configuration)), provider, modelName),
          retry,
        );
    watchdog.start();
    timing.modelRequest(lean ? (known?.early ?? null) : null);
    if (lean) {
      return streamLean(lean, {
        early: known?.early,
        system,
        messages,
        tools,
        maxSteps: settings.maxSteps,
        signal,
        retry,
        onActivity: () => watchdog.touch(),
      });
    }
    const result = streamText({
      model: model!,
      system,
      messages,
      tools,
      stopWhen: stepCountIs(settings.maxSteps),
      // Retried by withBoundedRetries: a failing provider is reported within seconds.
      maxRetries: 0,
      abortSignal: signal,
      // Failures are read from the stream (and logged by the turn); the default prints to stderr.
      onError: () => {},
    });
    // Rejected (NoOutputGeneratedError) when the model fails, and only awaited after a turn that
    // did not fail: handled here, or a failing provider's turn crashed the process.
    const totalUsage = Promise.resolve(result.totalUsage);
    totalUsage.catch(() => {});
    return { fullStream: result.fullStream as unknown as AsyncIterable<TurnStreamPart>, totalUsage };
  }

  private chargeOf(ctx: ServiceContext, plan: TurnPlan, messageId: number) {
    return {
      organizationId: ctx.principal.organizationId,
      projectId: plan.project.id,
      apiKeyId: ctx.principal.keyId,
      modelConfigurationId: plan.configuration.id,
      prices: {
        creditsPer1kInputTokens: Number(plan.configuration.creditsPer1kInputTokens),
        creditsPer1kOutputTokens: Number(plan.configuration.creditsPer1kOutputTokens),
      },
      reference: `message:${messageId}`,
    };
  }
}
