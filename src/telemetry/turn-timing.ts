import { performance } from 'node:perf_hooks';

/** The public timing of a reply (the `done` event's and the blocking reply's message), in ms. */
export interface TurnTimingView {
  /** Request arrival to the turn running: authentication, checks, both messages and the lease written. */
  queued_ms: number;
  /**
   * What the service itself added before the first token: request arrival to the model request,
   * plus the model's first chunk to its first event written. For a request sent early
   * (llm/speculative-requests.ts) that the turn took: arrival to that request, and its first
   * chunk's arrival (perhaps before the turn could read it) to the first event.
   */
  overhead_ms: number;
  /** Model request to the model's first chunk (its arrival); null when the model sent nothing. */
  model_first_token_ms: number | null;
  /** Request arrival to the reply finished (written and charged). */
  total_ms: number;
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/** A model request sent before the turn built its own (llm/speculative-requests.ts). */
export interface EarlySentRequest {
  readonly sentAt: number;
  /** The turn took its response: the model's time counts from `sentAt`. */
  readonly taken: boolean;
  /**
   * When its first bytes arrived, if before the turn read them: the model's first token came
   * then, and the wait for the turn is the service's.
   */
  readonly firstDataAt: number | null;
}

/**
 * The clock of one chat turn, on `performance.now()`. The runner marks a handful of moments; the
 * view, the Server-Timing header and the metrics are computed from them, so they agree.
 */
export class TurnTiming {
  private startedAt: number | null = null;
  private modelRequestAt: number | null = null;
  private early: EarlySentRequest | null = null;
  private firstChunkAt: number | null = null;
  private firstEventAt: number | null = null;
  private modelEndAt: number | null = null;
  private endAt: number | null = null;
  /** Time spent waiting for the database on the turn's own statements. */
  private dbMs = 0;

  /** `arrivedAt`: when the request arrived (see `requestArrival`); now by default. */
  constructor(readonly arrivedAt: number = performance.now()) {}

  started(): void {
    this.startedAt ??= performance.now();
  }

  /**
   * Just before the model request is sent (each step after the first is model time). `early`: a
   * request already sent for this turn; if the turn takes it, the model's time started when it
   * left, and what came before counts as the service's only up to then.
   */
  modelRequest(early: EarlySentRequest | null = null): void {
    if (this.modelRequestAt !== null) return;
    this.modelRequestAt = performance.now();
    this.early = early;
  }

  /** When the model request the turn used was sent. */
  private requestAt(): number | null {
    return this.early?.taken ? this.early.sentAt : this.modelRequestAt;
  }

  /** When the model's first chunk arrived (for an early request, perhaps before the turn read it). */
  private chunkAt(): number | null {
    if (this.firstChunkAt === null) return null;
    const arrived = this.early?.taken ? this.early.firstDataAt : null;
    return arrived !== null && arrived < this.firstChunkAt ? arrived : this.firstChunkAt;
  }

  /** The model's first chunk that becomes an event (text, a tool call). */
  modelChunk(): void {
    this.firstChunkAt ??= performance.now();
  }

  /** An event was written for the client; only the first after the first chunk counts. */
  eventWritten(): void {
    if (this.firstChunkAt !== null) this.firstEventAt ??= performance.now();
  }

  modelEnded(): void {
    this.modelEndAt ??= performance.now();
  }

  ended(): void {
    this.endAt ??= performance.now();
  }

  /** Awaits a database step, counting its time. */
  async db<T>(step: Promise<T>): Promise<T> {
    const start = performance.now();
    try {
      return await step;
    } finally {
      this.dbMs += performance.now() - start;
    }
  }

  view(): TurnTimingView {
    const end = this.endAt ?? performance.now();
    const started = this.startedAt ?? end;
    const requestAt = this.requestAt();
    const chunkAt = this.chunkAt();
    const beforeModel = (requestAt ?? end) - this.arrivedAt;
    const afterChunk = chunkAt !== null && this.firstEventAt !== null ? this.firstEventAt - chunkAt : 0;
    return {
      queued_ms: round(started - this.arrivedAt),
      overhead_ms: round(beforeModel + afterChunk),
      model_first_token_ms: requestAt !== null && chunkAt !== null ? round(chunkAt - requestAt) : null,
      total_ms: round(end - this.arrivedAt),
    };
  }

  /** Model request to the end of the model's stream (tool calls between steps included). */
  modelMs(): number {
    const requestAt = this.requestAt();
    if (requestAt === null) return 0;
    return round((this.modelEndAt ?? this.endAt ?? performance.now()) - requestAt);
  }

  /**
   * The `Server-Timing` header of a blocking reply: `db` (the turn's database statements),
   * `model` and `overhead` (as in the view), and `total`.
   */
  serverTiming(): string {
    const view = this.view();
    return [
      `db;dur=${round(this.dbMs)}`,
      `model;dur=${this.modelMs()}`,
      `overhead;dur=${view.overhead_ms}`,
      `total;dur=${view.total_ms}`,
    ].join(', ');
  }
}

/** When a request arrived, on the `performance.now()` clock (Fastify starts its clock at onRequest). */
export const requestArrival = (reply: { elapsedTime: number }): number =>
  performance.now() - reply.elapsedTime;
