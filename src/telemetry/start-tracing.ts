/**
 * Starts OpenTelemetry tracing when the standard variables ask for it (OTEL_EXPORTER_OTLP_ENDPOINT
 * or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Called by the entry points (main.ts, cli.ts) before they
 * load the application, so the instrumentations see `http`, `pg` and `undici` being loaded. When
 * the variables are unset, the SDK is not even imported.
 */
export async function startTracingIfConfigured(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint || env.OTEL_SDK_DISABLED === 'true') return;
  const { startOpenTelemetry } = await import('./otel-sdk.js');
  await startOpenTelemetry(env);
}
