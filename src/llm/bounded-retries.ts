import { APICallError, type LanguageModelV3 } from '@ai-sdk/provider';
import { RetryError, wrapLanguageModel } from 'ai';

export interface RetryPolicy {
  /** Retries after the first attempt. */
  retries: number;
  /** The wait before each retry (the last one repeats). */
  delaysMs: number[];
  /** A provider's `retry-after` longer than this is cut to it. */
  maxDelayMs: number;
}

/**
 * Short and bounded: a provider failing on every try is reported within a few seconds (issue 16),
 * where the AI SDK's own retries wait 2 s then 4 s, or up to a minute per `retry-after` header.
 */
export const DEFAULT_RETRY_POLICY: RetryPolicy = { retries: 2, delaysMs: [500, 1500], maxDelayMs: 2000 };

/**
 * The model with its calls retried on a provider's retryable answers (429, 5xx, a dropped
 * connection before the stream starts) by `policy`. Callers pass `maxRetries: 0` to the AI SDK so
 * retries happen here only. After the last failed retry the error is the SDK's `RetryError`
 * (its `errors` are every attempt's), as the SDK's own retries would give.
 */
export function withBoundedRetries(
  model: LanguageModelV3,
  policy: RetryPolicy = DEFAULT_RETRY_POLICY,
): LanguageModelV3 {
  return wrapLanguageModel({
    model,
    middleware: {
      specificationVersion: 'v3',
      wrapGenerate: ({ doGenerate, params }) => retrying(doGenerate, policy, params.abortSignal),
      wrapStream: ({ doStream, params }) => retrying(doStream, policy, params.abortSignal),
    },
  });
}

/** Calls `call` until it succeeds or `policy` gives up (also used by the lean client, llm/lean-client.ts). */
export async function retrying<T>(
  call: () => PromiseLike<T>,
  policy: RetryPolicy,
  signal?: AbortSignal,
): Promise<T> {
  const errors: unknown[] = [];
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      errors.push(err);
      const retryable = APICallError.isInstance(err) && err.isRetryable;
      if (!retryable || attempt >= policy.retries || signal?.aborted) {
        if (errors.length === 1) throw err;
        throw new RetryError({
          message: `Failed after ${errors.length} attempts. Last error: ${messageOf(err)}`,
          reason: retryable ? 'maxRetriesExceeded' : 'errorNotRetryable',
          errors,
        });
      }
      await wait(delayFor(err, attempt, policy), signal);
    }
  }
}

function delayFor(err: APICallError, attempt: number, policy: RetryPolicy): number {
  const planned = policy.delaysMs[Math.min(attempt, policy.delaysMs.length - 1)] ?? 0;
  const headers = err.responseHeaders ?? {};
  const afterMs = Number.parseFloat(headers['retry-after-ms'] ?? '');
  const afterSeconds = Number.parseFloat(headers['retry-after'] ?? '');
  const asked = Number.isFinite(afterMs)
    ? afterMs
    : Number.isFinite(afterSeconds)
      ? afterSeconds * 1000
      : null;
  if (asked === null || asked < 0) return planned;
  return Math.min(asked, policy.maxDelayMs);
}

function wait(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
