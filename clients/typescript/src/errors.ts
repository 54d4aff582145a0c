/**
 * One error class for both API families. v1 answers `{"error": {"message", "code", "details"}}`,
 * v2 answers `{"status": "error", "response": {"code": <status>, "error": <identifier>, "message"}}`;
 * either becomes a `ScriptoriumError` with the HTTP `status`, the stable snake_case `code`, and
 * `retryAfter` (seconds, from `Retry-After`) when the server said when to try again.
 */
export class ScriptoriumError extends Error {
  override readonly name = 'ScriptoriumError';

  constructor(
    /** The HTTP status; 0 when no answer arrived (a stream that could not be resumed). */
    readonly status: number,
    /** Stable snake_case identifier: `chat_not_found`, `rate_limited`, `insufficient_credits`... */
    readonly code: string,
    message: string,
    /** Seconds to wait before retrying (429, some 503s); null when the server did not say. */
    readonly retryAfter: number | null = null,
    /** v1 field errors: field -> messages. */
    readonly details: Record<string, string[]> = {},
    /** The parsed error body, as sent. */
    readonly body: unknown = null,
  ) {
    super(message);
  }

  /** The error of an answer whose body was already read (`body`: parsed JSON, or text). */
  static fromBody(status: number, body: unknown, headers?: Headers): ScriptoriumError {
    const retryAfter = parseRetryAfter(headers?.get('retry-after') ?? null);
    const b = body as any;
    if (b && typeof b === 'object' && b.error && typeof b.error === 'object') {
      return new ScriptoriumError(
        status,
        String(b.error.code ?? `http_${status}`),
        String(b.error.message ?? ''),
        retryAfter,
        b.error.details ?? {},
        body,
      );
    }
    if (b && typeof b === 'object' && b.status === 'error' && b.response) {
      return new ScriptoriumError(
        status,
        String(b.response.error ?? `http_${status}`),
        String(b.response.message ?? ''),
        retryAfter,
        {},
        body,
      );
    }
    const text = typeof body === 'string' ? body : '';
    return new ScriptoriumError(status, `http_${status}`, text || `HTTP ${status}`, retryAfter, {}, body);
  }

  /** Reads the body of a failed response. */
  static async fromResponse(response: Response): Promise<ScriptoriumError> {
    const text = await response.text().catch(() => '');
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // Not JSON (a proxy's page): kept as text.
    }
    return ScriptoriumError.fromBody(response.status, body, response.headers);
  }
}

function parseRetryAfter(value: string | null): number | null {
  if (value === null) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}
