import { Agent, type Dispatcher, getGlobalDispatcher, fetch as undiciFetch } from 'undici';
import { checkOutboundUrl, guardedLookup, OutboundUrlError } from './outbound.js';

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

/**
 * The same guard for undici's `request` (the lean model client, llm/lean-client.ts): the URL is
 * checked on every call (throws `OutboundUrlError`), and the dispatcher to use is returned: one
 * that checks resolved addresses, unless private addresses are allowed or the host is allow-listed.
 */
export function guardedModelDispatcher(rule: ModelUrlRule): (url: string) => Dispatcher {
  let agent: Agent | null = null;
  return (raw) => {
    if (rule.outboundAllowPrivate) return getGlobalDispatcher();
    const url = assertModelBaseUrlAllowed(raw, rule);
    if (isAllowListed(url, rule.modelBaseUrlAllow)) return getGlobalDispatcher();
    agent ??= new Agent({ connect: { lookup: guardedLookup(false) } });
    return agent;
  };
}
