import { Agent, getGlobalDispatcher, fetch as undiciFetch } from 'undici';
import { checkOutboundUrl, guardedLookup, OutboundUrlError } from './outbound.js';
import { StreamClient, type StreamDispatcher } from './stream-client.js';

/** What decides where a model configuration's `base_url` may point. */
export interface ModelUrlRule {
  outboundAllowPrivate: boolean;
  modelBaseUrlAllow: readonly string[];
}

/** `host:port` of a URL as MODEL_BASE_URL_ALLOW patterns name it (`[::1]:11434`, default ports filled in). */
function hostPort(url: URL): { host: string; port: string } {
  return {
    host: url.hostname.toLowerCase(),
    port: url.port || (url.protocol === 'https:' ? '443' : '80'),
  };
}

/** A pattern is `host:port`; the host may start with `*.` (any subdomain), the port may be `*`. */
export function isAllowListed(url: URL, patterns: readonly string[]): boolean {
  const { host, port } = hostPort(url);
  return patterns.some((pattern) => {
    const colon = pattern.lastIndexOf(':');
    const [patternHost, patternPort] = [pattern.slice(0, colon), pattern.slice(colon + 1)];
    if (patternPort !== '*' && patternPort !== port) return false;
    if (patternHost.startsWith('*.')) return host.endsWith(patternHost.slice(1));
    return patternHost === host;
  });
}

/**
 * A model base URL follows the rule of webhooks and tool servers (https, public addresses, unless
 * OUTBOUND_ALLOW_PRIVATE), except for the operator's MODEL_BASE_URL_ALLOW entries (a model server
 * on this machine or network), which may also use http. Throws `OutboundUrlError`.
 */
export function assertModelBaseUrlAllowed(raw: string, rule: ModelUrlRule): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new OutboundUrlError('is not a valid URL');
  }
  if (isAllowListed(url, rule.modelBaseUrlAllow)) return checkOutboundUrl(raw, true);
  return checkOutboundUrl(raw, rule.outboundAllowPrivate);
}

function requestUrl(input: Parameters<typeof fetch>[0]): string {
  if (typeof input === 'string') return input;
  return input instanceof URL ? input.href : input.url;
}

/**
 * The `fetch` given to the AI SDK providers: every request's URL is checked again (a configuration
 * saved under another rule), and a host name is checked once resolved, so a public name pointing
 * at a private address is refused when connecting. Allow-listed hosts use the plain fetch.
 */
export function guardedModelFetch(rule: ModelUrlRule): typeof fetch {
  // Redirects are not followed (as the lean client and webhooks do not): a redirect is the
  // provider's answer, an error to the caller, never a second request to wherever it points.
  if (rule.outboundAllowPrivate)
    return (input, init) => globalThis.fetch(input, { ...init, redirect: 'manual' });
  let agent: Agent | null = null;
  return async (input, init) => {
    const url = assertModelBaseUrlAllowed(requestUrl(input), rule);
    if (isAllowListed(url, rule.modelBaseUrlAllow))
      return globalThis.fetch(input, { ...init, redirect: 'manual' });
    agent ??= new Agent({ connect: { lookup: guardedLookup(false) } });
    return undiciFetch(
      input as never,
      { ...init, redirect: 'manual', dispatcher: agent } as never,
    ) as unknown as Promise<Response>;
  };
}

/** The process's stream clients, made when first used: one that checks resolved addresses, one that does not. */
const streamClients = new Map<'guarded' | 'open', StreamClient>();

function streamClient(kind: 'guarded' | 'open'): StreamClient {
  let client = streamClients.get(kind);
  if (!client) {
    client = new StreamClient(kind === 'guarded' ? { lookup: guardedLookup(false) } : {});
    streamClients.set(kind, client);
  }
  return client;
}

/**
 * The same guard for the lean model client (llm/lean-client.ts): the URL is checked on every call
 * (throws `OutboundUrlError`), and the dispatcher to use is returned: one that checks resolved
 * addresses, unless private addresses are allowed or the host is allow-listed. Calls go through
 * the process's own stream client (net/stream-client.ts), or through undici when `instrumented`
 * says tracing is on: OpenTelemetry's undici instrumentation gives the model request its client
 * span and its `traceparent`.
 */
export function guardedModelDispatcher(
  rule: ModelUrlRule,
  instrumented: () => boolean = () => false,
): (url: string) => StreamDispatcher {
  let agent: Agent | null = null;
  return (raw) => {
    const open =
      rule.outboundAllowPrivate ||
      isAllowListed(assertModelBaseUrlAllowed(raw, rule), rule.modelBaseUrlAllow);
    if (instrumented()) {
      if (open) return getGlobalDispatcher();
      agent ??= new Agent({ connect: { lookup: guardedLookup(false) } });
      return agent;
    }
    return streamClient(open ? 'open' : 'guarded');
  };
}
