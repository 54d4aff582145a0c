import { AISDKError } from '@ai-sdk/provider';
import { ApiError, toApiError } from '../http/errors.js';
import { providerFailure } from '../llm/provider-errors.js';

/** The `error` event's message for a turn whose process stopped before its end (code 500). */
export const TURN_INTERRUPTED_MESSAGE =
  'The turn was interrupted: the server running it stopped before the reply finished. Send the message again.';

/** Why a turn failed, as the client will read it (an `error` event or a 500 body). */
export class TurnFailure extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly cancelled = false,
  ) {
    super(message);
  }
}

/** A cancel request (POST /api/v2/chats/:id/cancel) stopped the turn: its partial reply is kept. */
export class TurnCancelled extends TurnFailure {
  constructor() {
    super('The reply was stopped by a cancel request', 'turn_cancelled', true);
  }
}

export function describeFailure(err: unknown): TurnFailure {
  if (err instanceof TurnFailure) return err;
  // The provider's own words may come from any server a base URL names: only its status is shown.
  const provider = providerFailure(err);
  if (provider !== null) return new TurnFailure(`The model provider failed: ${provider}`, 'model_error');
  if (err instanceof ApiError) return new TurnFailure(err.message, err.code);
  const apiError = toApiError('v2', err);
  if (apiError.status !== 500) return new TurnFailure(apiError.message, apiError.code);
  // Not the model's failure, and its message holds SQL or the database's address: those stay in the log.
  if (isDatabaseFailure(err))
    return new TurnFailure(
      'The reply could not be saved: the database is unavailable; send the message again',
      'database_unavailable',
    );
  if (AISDKError.isInstance(err)) {
    // The SDK's other errors quote what the provider sent (a body that is not JSON, a bad field).
    return new TurnFailure(`The model's answer could not be used (${err.name})`, 'model_error');
  }
  return new TurnFailure(`The model failed while generating the reply: ${errorMessage(err)}`, 'model_error');
}

/**
 * A failed query (Drizzle wraps those) or a lost connection of the service's database. Model and
 * tool-server failures never look like this: the AI SDK wraps them in its own errors.
 */
function isDatabaseFailure(err: unknown): boolean {
  for (let e = err as any, depth = 0; e && depth < 5; e = e.cause, depth++) {
    if (e.name === 'DrizzleQueryError' || e.constructor?.name === 'DatabaseError') return true;
    if (
      /^Connection terminated|not queryable|timeout exceeded when trying to connect/.test(String(e.message))
    )
      return true;
    if (e.syscall === 'connect') return true;
  }
  return false;
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return typeof err === 'string' ? err : (JSON.stringify(err) ?? 'unknown error');
}
