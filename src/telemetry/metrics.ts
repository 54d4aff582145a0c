import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { TurnTimingView } from './turn-timing.js';

export type TurnOutcomeLabel = 'completed' | 'cancelled' | 'failed';
export type WebhookOutcomeLabel = 'delivered' | 'retrying' | 'failed' | 'superseded';

export interface QueueDepthRow {
  queue: string;
  state: string;
  count: number;
}

export interface ServiceMetricsOptions {
  /** Jobs waiting or running per queue and state, read when /metrics is scraped. */
  queueDepth?: () => Promise<QueueDepthRow[]>;
}

// From a few milliseconds of overhead to replies that run for minutes.
const OVERHEAD_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
const MODEL_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const TURN_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/**
 * The process's Prometheus instruments, built once by the composition root and served at
 * `/metrics`. Turns, generations and webhook deliveries record into it; the worker records too
 * (its figures are not served: it has no HTTP app).
 */
export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'method' | 'route' | 'status_code'>;
  private readonly requestDuration: Histogram<'method' | 'route' | 'status_code'>;
  private readonly turnOverhead: Histogram<'provider' | 'outcome'>;
  private readonly modelFirstToken: Histogram<'provider' | 'outcome'>;
  private readonly turnDuration: Histogram<'provider' | 'outcome'>;
  private readonly tokens: Counter<'provider' | 'model' | 'type'>;
  private readonly credits: Counter<'provider' | 'model'>;
  private readonly webhookDeliveries: Counter<'outcome'>;
  private readonly openStreams: Gauge;
  private readonly speculativeRequests: Counter<'outcome'>;

  constructor(options: ServiceMetricsOptions = {}) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    // Built here, once per process, not per HTTP app: tests build several apps on one root.
    const httpLabels = ['method', 'route', 'status_code'] as const;
    this.requests = new Counter({
      name: 'http_requests_total',
      help: 'HTTP requests',
      labelNames: httpLabels,
      registers,
    });
    this.requestDuration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration until the response is complete (streams included)',
      labelNames: httpLabels,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, 300],
      registers,
    });
    const turnLabels = ['provider', 'outcome'] as const;
    this.turnOverhead = new Histogram({
      name: 'scriptorium_turn_overhead_seconds',
      help: "Time the service added before a chat reply's first token (request to model request, first chunk to first event)",
      labelNames: turnLabels,
      buckets: OVERHEAD_BUCKETS,
      registers,
    });
    this.modelFirstToken = new Histogram({
      name: 'scriptorium_model_first_token_seconds',
      help: "Model request to the model's first chunk, per chat turn",
      labelNames: turnLabels,
      buckets: MODEL_BUCKETS,
      registers,
    });
    this.turnDuration = new Histogram({
      name: 'scriptorium_turn_duration_seconds',
      help: 'Request arrival to the end of a chat turn',
      labelNames: turnLabels,
      buckets: TURN_BUCKETS,
      registers,
    });
    this.tokens = new Counter({
      name: 'scriptorium_model_tokens_total',
      help: 'Tokens reported by models (chat turns and artifact generations); type is input or output',
      labelNames: ['provider', 'model', 'type'],
      registers,
    });
    this.credits = new Counter({
      name: 'scriptorium_credits_charged_total',
      help: 'Credits charged for model usage',
      labelNames: ['provider', 'model'],
      registers,
    });
    this.webhookDeliveries = new Counter({
      name: 'scriptorium_webhook_delivery_attempts_total',
      help: 'Webhook delivery attempts by outcome: delivered, retrying (failed, retry scheduled), failed (retries exhausted), superseded (redelivered meanwhile)',
      labelNames: ['outcome'],
      registers,
    });
    this.openStreams = new Gauge({
      name: 'scriptorium_open_streams',
      help: 'Server-Sent Event responses open in this process (chat and artifact streams)',
      registers,
    });
    this.speculativeRequests = new Counter({
      name: 'scriptorium_early_model_requests_total',
      help: "Model requests sent before a turn's opening statement answered (llm/speculative-requests.ts), by outcome: used, or dropped (aborted: the turn built another payload or was refused)",
      labelNames: ['outcome'],
      registers,
    });
    const { queueDepth } = options;
    if (queueDepth) {
      new Gauge({
        name: 'scriptorium_job_queue_depth',
        help: 'Background jobs waiting (created, retry) or running (active), per queue',
        labelNames: ['queue', 'state'],
        registers,
        async collect() {
          this.reset();
          // A scrape must not fail because the database is down: the gauge is then empty.
          const rows = await queueDepth().catch(() => []);
          for (const row of rows) this.set({ queue: row.queue, state: row.state }, row.count);
        },
      });
    }
  }

  httpRequest(method: string, route: string, status: number, seconds: number): void {
    const labels = { method, route, status_code: String(status) };
    this.requests.inc(labels);
    this.requestDuration.observe(labels, seconds);
  }

  countEarlyRequest(outcome: 'used' | 'dropped'): void {
    this.speculativeRequests.inc({ outcome });
  }

  observeTurn(provider: string, outcome: TurnOutcomeLabel, timing: TurnTimingView): void {
    const labels = { provider, outcome };
    this.turnOverhead.observe(labels, timing.overhead_ms / 1000);
    if (timing.model_first_token_ms !== null)
      this.modelFirstToken.observe(labels, timing.model_first_token_ms / 1000);
    this.turnDuration.observe(labels, timing.total_ms / 1000);
  }

  countUsage(
    provider: string,
    model: string,
    usage: { inputTokens: number; outputTokens: number },
    credits: number,
  ): void {
    if (usage.inputTokens > 0) this.tokens.inc({ provider, model, type: 'input' }, usage.inputTokens);
    if (usage.outputTokens > 0) this.tokens.inc({ provider, model, type: 'output' }, usage.outputTokens);
    if (credits > 0) this.credits.inc({ provider, model }, credits);
  }

  webhookAttempt(outcome: WebhookOutcomeLabel): void {
    this.webhookDeliveries.inc({ outcome });
  }

  streamOpened(): void {
    this.openStreams.inc();
  }

  streamClosed(): void {
    this.openStreams.dec();
  }
}
