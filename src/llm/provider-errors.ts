import { APICallError } from '@ai-sdk/provider';
import { RetryError } from 'ai';
import { OutboundUrlError } from '../net/outbound.js';

/**
 * What API callers may read of a model provider's failure: its HTTP status, never its message or
 * body. A base URL can point at any server (the probe pointed one at an internal service and got
 * its answer back in the chat error), so the provider's words stay in the log, where the caller
 * that failed logs the original error. Null when `err` is not a provider failure.
 */
export function providerFailure(err: unknown): string | null {
  if (RetryError.isInstance(err)) {
    const last = providerFailure(err.lastError) ?? 'the provider failed';
    return `${last} (${err.errors.length} attempts)`;
  }
  const refused = outboundRefusal(err);
  if (refused) return `the model's base URL is refused: ${refused.message}`;
  if (APICallError.isInstance(err)) {
    // A 2xx status on a failure: the answer started, then its stream broke off or could not be read.
    if (err.statusCode && err.statusCode >= 200 && err.statusCode < 300)
      return `the provider's answer broke off (HTTP ${err.statusCode})`;
    return err.statusCode
      ? `the provider answered HTTP ${err.statusCode}`
      : 'the provider could not be reached';
  }
  return null;
}

/** The guard's refusal, also when the SDK or fetch wrapped it. */
function outboundRefusal(err: unknown): OutboundUrlError | null {
  for (let e = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof OutboundUrlError) return e;
  }
  return null;
}
