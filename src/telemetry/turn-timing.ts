import { performance } from 'node:perf_hooks';

/** The public timing of a reply (the `done` event's and the blocking reply's message), in ms. */
export interface TurnTimingView {
  /** Request arrival to the turn running: authentication, checks, both messages and the lease written. */
  queued_ms: number;
  /**
   * What the service itself added before the first token: request arrival to the model request,
   * plus the model's first chunk to its first event written.
   */
  overhead_ms: number;
  /** Model request to the model's first chunk; null when the model sent nothing. */
  model_first_token_ms: number | null;
  /** Request arrival to the reply finished (written and charged). */
  total_ms: number;
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/**
 * The clock of one chat turn, on `performance.now()`. The runner marks a handful of moments; the
 * view, the Server-Timing header and the metrics are computed from them, so they agree.
 */
export class TurnTiming {
  private startedAt: number | null = null;
  private modelRequestAt: number | null = null;
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

  /** Just before the model request is sent (each step after the first is model time). */
  modelRequest(): void {
    this.modelRequestAt ??= performance.now();
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
    const beforeModel = (this.modelRequestAt ?? end) - this.arrivedAt;
    const afterChunk =
      this.firstChunkAt !== null && this.firstEventAt !== null ? this.firstEventAt - this.firstChunkAt : 0;
    return {
      queued_ms: round(started - this.arrivedAt),
      overhead_ms: round(beforeModel + afterChunk),
      model_first_token_ms:
        this.modelRequestAt !== null && this.firstChunkAt !== null
          ? round(this.firstChunkAt - this.modelRequestAt)
          : null,
      total_ms: round(end - this.arrivedAt),
    };
  }

  /** Model request to the end of the model's stream (tool calls between steps included). */
  modelMs(): number {
    if (this.modelRequestAt === null) return 0;
    return round((this.modelEndAt ?? this.endAt ?? performance.now()) - this.modelRequestAt);
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
