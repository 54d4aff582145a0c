import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { OutboundUrlError } from '../net/outbound.js';

const MAX_DETAIL = 300;

/** A tool server that could not be reached, refused the connection, or broke the protocol. */
export class McpUnavailableError extends Error {
  override readonly name = 'McpUnavailableError';
}

/** A tool call that failed: the server's own error result, a protocol error, or a timeout. */
export class McpToolError extends Error {
  override readonly name = 'McpToolError';
}

export class McpTimeoutError extends Error {
  override readonly name = 'McpTimeoutError';
}

/**
 * A short, single-line reason safe to show to API clients and the model: the servers' messages
 * and network errors, never the request (headers carry credentials).
 */
export function describeMcpError(error: unknown, secrets: string[] = []): string {
  if (error instanceof McpError && error.code === ErrorCode.RequestTimeout) return 'the request timed out';
  if (error instanceof OutboundUrlError) return `the URL ${error.message}`;
  const e = error as { message?: unknown; cause?: { code?: unknown; message?: unknown } } | null;
  let text = typeof e?.message === 'string' ? e.message : String(error);
  // undici reports "fetch failed" and keeps the useful part (ECONNREFUSED, a refused lookup) in the cause.
  const cause = e?.cause;
  if (text === 'fetch failed' && cause) {
    text = typeof cause.code === 'string' ? `connection failed (${cause.code})` : String(cause.message);
  }
  // A server may echo the request in its error text; the header values never leave this process.
  for (const secret of secrets) if (secret.length >= 4) text = text.split(secret).join('[redacted]');
  text = text.replace(/\s+/g, ' ').trim();
  return text.length > MAX_DETAIL ? `${text.slice(0, MAX_DETAIL)}…` : text;
}
