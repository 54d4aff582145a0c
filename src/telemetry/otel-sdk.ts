import { register } from 'node:module';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { tracingStarted } from './tracing.js';

// Probes and scrapes would drown the traces of real work.
const QUIET_PATHS = new Set(['/health', '/ready', '/metrics']);

/**
 * The OpenTelemetry Node SDK with an OTLP/HTTP trace exporter and the maintained instrumentations
 * of inbound and outbound HTTP (W3C `traceparent` accepted and propagated), `fetch` (undici: model
 * providers, MCP servers) and `pg`. OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG) and the other
 * standard variables are read by the SDK. Only loaded by start-tracing.ts.
 */
export async function startOpenTelemetry(env: NodeJS.ProcessEnv): Promise<void> {
  // ES modules loaded from here on are hooked too (import-in-the-middle), not only require().
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);
  // Metrics are Prometheus at /metrics and logs are pino lines: the SDK exports traces only.
  env.OTEL_METRICS_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  env.OTEL_SERVICE_NAME ??= 'scriptorium';
  const sdk = new NodeSDK({
    traceExporter: new OTLPTraceExporter(),
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (request) => QUIET_PATHS.has((request.url ?? '').split('?')[0]),
      }),
      new UndiciInstrumentation(),
      // Statements outside traced work (the job queue's polling) would each be a trace of their own.
      new PgInstrumentation({ enhancedDatabaseReporting: false, requireParentSpan: true }),
    ],
  });
  sdk.start();
  tracingStarted({
    recordContent: env.OTEL_RECORD_CONTENT === 'true',
    shutdown: () => sdk.shutdown(),
  });
}
