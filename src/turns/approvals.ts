import { setTimeout as sleep } from 'node:timers/promises';
import type { Tool } from 'ai';
import { and, eq, sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/client.js';
import { type ToolApprovalStatus, toolApprovals } from '../db/schema/index.js';
import { formatTimestamp } from '../http/timestamps.js';
import type { Notifier } from '../streams/notifier.js';
import type { TurnEvent } from '../streams/protocol.js';
import { asParameters, ToolDenied } from './tool-executions.js';
import type { IdleWatchdog } from './watchdog.js';
import { recordApprovalRequired } from './webhook-events.js';

/** Decisions reach the process running the turn on this channel (payload: the approval id). */
export const APPROVAL_CHANNEL = 'scriptorium_tool_approvals';

/** How often a waiting tool call reads its approval, should a notification be missed. */
const POLL_MS = 1_000;
/** How long a gated call waits for its `tool_start` to be published before announcing itself anyway. */
const TOOL_START_WAIT_MS = 5_000;

/** Whether an agent's `tools_requiring_approval` covers a tool. */
export const needsApproval = (list: readonly string[], toolName: string): boolean =>
  list.includes('*') || list.includes(toolName);

/**
 * The process's waiting tool calls, woken by decisions: notified from any process on
 * APPROVAL_CHANNEL, or directly when the decision was taken here. One listener per process.
 */
export class ApprovalWaits {
  private readonly waiting = new Map<number, Set<() => void>>();
  /** How to stop each waiting call's turn, for a shutdown. */
  private readonly stoppers = new Set<(reason: unknown) => void>();
  private stopping: unknown = null;
  private listening: Promise<void> | null = null;

  constructor(
    private readonly notifier: Notifier,
    private readonly log: FastifyBaseLogger,
  ) {}

  /**
   * The process is shutting down: turns waiting for a person stop now (with `reason`) instead of
   * holding the shutdown's grace period, and later calls stop as soon as they would wait.
   */
  stopAll(reason: unknown): void {
    this.stopping = reason;
    for (const stop of [...this.stoppers]) stop(reason);
  }

  /** Registers how to stop a waiting call's turn; returns the unregistration. */
  hold(stop: (reason: unknown) => void): () => void {
    if (this.stopping !== null) stop(this.stopping);
    this.stoppers.add(stop);
    return () => this.stoppers.delete(stop);
  }

  wake(approvalId: number): void {
    for (const wake of this.waiting.get(approvalId) ?? []) wake();
  }

  /** Resolves when the approval may have been decided, or after `ms`, or when `signal` aborts. */
  async nap(approvalId: number, ms: number, signal: AbortSignal): Promise<void> {
    await this.listen();
    const wakeUp = new AbortController();
    const wake = () => wakeUp.abort();
    let set = this.waiting.get(approvalId);
    if (!set) {
      set = new Set();
      this.waiting.set(approvalId, set);
    }
    set.add(wake);
    try {
      await sleep(ms, undefined, { signal: AbortSignal.any([signal, wakeUp.signal]) }).catch(() => {});
    } finally {
      set.delete(wake);
      if (set.size === 0) this.waiting.delete(approvalId);
    }
  }

  private listen(): Promise<void> {
    this.listening ??= this.notifier
      .listen(APPROVAL_CHANNEL, (payload) => this.wake(Number(payload)))
      .catch((err) => this.log.warn({ err }, 'could not listen for approval decisions; polling instead'));
    return this.listening;
  }
}

export interface ApprovalTurn {
  organizationId: number;
  projectId: number;
  chatId: number;
  turnId: number;
  /** The assistant message (the reply). */
  messageId: number;
}

/**
 * Holds a turn's tool calls that need approval (the agent's `tools_requiring_approval`) until a
 * decision: the call is stored as pending (with the `chat_approval_required` webhook), announced
 * with `approval_required` after its `tool_start`, and waited for while the turn keeps its lease.
 * Approved, the tool runs; denied or undecided at `expires_at`, the call throws ToolDenied. It
 * wraps the tools' `execute`, so whichever model client runs the tool loop gets the same gate.
 */
export class ApprovalGate {
  private readonly started = new Set<string>();
  private readonly startWaiters = new Map<string, () => void>();

  constructor(
    private readonly o: {
      db: Db;
      waits: ApprovalWaits;
      turn: ApprovalTurn;
      /** The agent's `tools_requiring_approval`. */
      list: readonly string[];
      timeoutMs: number;
      /** The turn's publisher: `approval_required` goes into its numbered stream. */
      publish: (event: TurnEvent) => Promise<void>;
      /** The turn's abort signal (cancel, shutdown, failure). */
      signal: AbortSignal;
      /** Stops the turn (a shutdown does not wait for people). */
      stopTurn: (reason: unknown) => void;
      /** Paused while a call waits: waiting for a person is not a silent model. */
      watchdog: IdleWatchdog;
    },
  ) {}

  /** Told of every event the turn publishes, so `approval_required` follows its `tool_start`. */
  observe(event: TurnEvent): void {
    if (event.name !== 'tool_start') return;
    this.started.add(event.data.tool_call_id);
    this.startWaiters.get(event.data.tool_call_id)?.();
  }

  wrap(tools: Record<string, Tool>): Record<string, Tool> {
    const wrapped: Record<string, Tool> = {};
    for (const [name, tool] of Object.entries(tools)) {
      const execute = tool.execute;
      wrapped[name] =
        execute && needsApproval(this.o.list, name)
          ? {
              ...tool,
              execute: async (input: unknown, options: { toolCallId: string }) => {
                await this.approve(name, options.toolCallId, input);
                return execute.call(tool, input, options as never);
              },
            }
          : tool;
    }
    return wrapped;
  }

  /** Resolves when the call is approved; throws ToolDenied, or the turn's abort reason. */
  private async approve(toolName: string, toolCallId: string, input: unknown): Promise<void> {
    const { db, turn, signal } = this.o;
    // Held as a running tool under its own key (no run time is kept for it).
    const holdKey = `approval:${toolCallId}`;
    this.o.watchdog.toolStarted(holdKey);
    const release = () => {
      this.o.watchdog.toolFinished(holdKey);
      this.o.watchdog.takeToolTime(holdKey);
    };
    const unhold = this.o.waits.hold(this.o.stopTurn);
    try {
      const parameters = asParameters(input);
      const approval = await db.transaction(async (tx) => {
        const [row] = await tx
          .insert(toolApprovals)
          .values({
            organizationId: turn.organizationId,
            chatId: turn.chatId,
            turnId: turn.turnId,
            messageId: turn.messageId,
            toolCallId,
            toolName,
            parameters,
            status: 'pending',
            expiresAt: sql`now() + make_interval(secs => ${this.o.timeoutMs / 1000})`,
          })
          .returning({ id: toolApprovals.id, expiresAt: toolApprovals.expiresAt });
        const pending = {
          tool_call_id: toolCallId,
          tool_name: toolName,
          parameters,
          expires_at: formatTimestamp(row.expiresAt),
        };
        await recordApprovalRequired(tx, turn, pending);
        return { id: row.id, pending };
      });
      await this.toolStarted(toolCallId);
      // A turn stopped meanwhile announces nothing; `decision` records the call as cancelled.
      if (!signal.aborted) await this.o.publish({ name: 'approval_required', data: approval.pending });
      const decision = await this.decision(approval.id);
      if (decision.status === 'approved') return;
      throw new ToolDenied(
        decision.status === 'denied'
          ? `The tool call was denied${decision.reason ? `: ${decision.reason}` : ''}`
          : `The tool call was not approved within ${formatMs(this.o.timeoutMs)}; it did not run`,
      );
    } finally {
      unhold();
      release();
    }
  }

  private toolStarted(toolCallId: string): Promise<void> {
    if (this.started.has(toolCallId)) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.startWaiters.delete(toolCallId);
        this.o.signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, TOOL_START_WAIT_MS);
      this.startWaiters.set(toolCallId, done);
      this.o.signal.addEventListener('abort', done, { once: true });
    });
  }

  /** Waits for the decision (notified, else polled) until the deadline, which makes it `expired`. */
  private async decision(approvalId: number): Promise<{ status: ToolApprovalStatus; reason: string | null }> {
    const { db, signal, waits } = this.o;
    const deadline = Date.now() + this.o.timeoutMs;
    for (;;) {
      if (signal.aborted) {
        await db
          .update(toolApprovals)
          .set({ status: 'cancelled' })
          .where(and(eq(toolApprovals.id, approvalId), eq(toolApprovals.status, 'pending')))
          .catch(() => {});
        throw signal.reason;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        // The database's clock decides, as it does for a decision arriving at the same moment.
        const [expired] = await db
          .update(toolApprovals)
          .set({ status: 'expired' })
          .where(
            and(
              eq(toolApprovals.id, approvalId),
              eq(toolApprovals.status, 'pending'),
              sql`${toolApprovals.expiresAt} <= now()`,
            ),
          )
          .returning({ status: toolApprovals.status, reason: toolApprovals.reason });
        if (expired) return expired;
      }
      const [row] = await db
        .select({ status: toolApprovals.status, reason: toolApprovals.reason })
        .from(toolApprovals)
        .where(eq(toolApprovals.id, approvalId));
      if (row.status !== 'pending') return row;
      await waits.nap(approvalId, Math.max(10, Math.min(POLL_MS, remaining)), signal);
    }
  }
}

/** The tools as a turn offers them: gated when its agent requires approvals. */
export const withApprovals = (gate: ApprovalGate | null, tools: Record<string, Tool>) =>
  gate ? gate.wrap(tools) : tools;

function formatMs(ms: number): string {
  if (ms % 60_000 === 0) return `${ms / 60_000} minute${ms === 60_000 ? '' : 's'}`;
  if (ms >= 1000) return `${Math.round(ms / 100) / 10} s`;
  return `${ms} ms`;
}
