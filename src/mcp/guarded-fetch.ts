import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { Agent, fetch as undiciFetch } from 'undici';
import { guardedLookup } from '../net/outbound.js';

export interface GuardedFetch {
  fetch: FetchLike;
  close(): Promise<void>;
}

/**
 * A fetch for the MCP transports whose every connection resolves its host through `guardedLookup`,
 * so a public name that points at a private address is refused when connecting, not only when the
 * URL is saved. Literal IP hosts never reach a lookup; `checkOutboundUrl` refuses private ones
 * before each connection.
 */
export function createGuardedFetch(allowPrivate: boolean, connectTimeoutMs: number): GuardedFetch {
  const agent = new Agent({
    connect: { lookup: guardedLookup(allowPrivate), timeout: connectTimeoutMs },
    // The server-to-client event streams stay open while idle; call timeouts bound each request.
    bodyTimeout: 0,
    headersTimeout: 0,
  });
  // undici's own fetch, not the global one, so the dispatcher and the fetch are the same version.
  const fetch: FetchLike = (url, init) =>
    undiciFetch(url, { ...init, dispatcher: agent } as never) as unknown as Promise<Response>;
  return { fetch, close: () => agent.close() };
}
