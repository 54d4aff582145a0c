import type { Queryable } from '../db/client.js';
import { toolExecutions } from '../db/schema/index.js';
import type { TurnEvent } from '../streams/protocol.js';
import { errorMessage } from './failure.js';

/**
 * Thrown by a gated tool call that was denied or not decided in time: the tool did not run. Its
 * message is the tool's result for the model and the tool execution's `error.message`.
 */
export class ToolDenied extends Error {
  override readonly name = 'ToolDenied';
}

/** A finished tool call as the SDK's stream reports it. */
export interface FinishedToolCall {
  type: 'tool-result' | 'tool-error';
  toolCallId: string;
  toolName: string;
  input: unknown;
  output?: unknown;
  error?: unknown;
}

/**
 * Stores a tool call of a reply (DESIGN.md 4: `completed`, or `failed` with its error; `denied`
 * when it needed an approval it did not get) and returns its event.
 */
export async function recordToolExecution(
  db: Queryable,
  call: { organizationId: number; messageId: number; part: FinishedToolCall; executionTimeMs: number },
): Promise<Extract<TurnEvent, { name: 'tool_result' }>['data']> {
  const { part } = call;
  const failed = part.type === 'tool-error';
  const result = failed ? null : toJson(part.output);
  const error = failed ? { message: errorMessage(part.error) } : null;
  await db.insert(toolExecutions).values({
    organizationId: call.organizationId,
    messageId: call.messageId,
    toolName: part.toolName,
    toolCallId: part.toolCallId,
    status: part.error instanceof ToolDenied ? 'denied' : failed ? 'failed' : 'completed',
    parameters: asParameters(part.input),
    result,
    error,
    executionTimeMs: call.executionTimeMs,
  });
  return {
    tool_call_id: part.toolCallId,
    tool_name: part.toolName,
    result,
    error,
    execution_time_ms: call.executionTimeMs,
  };
}

/** Spec 2: `parameters` is an object; input the model sent in another shape is kept under `input`. */
export function asParameters(input: unknown): Record<string, unknown> {
  if (input !== null && typeof input === 'object' && !Array.isArray(input))
    return toJson(input) as Record<string, unknown>;
  return input === undefined ? {} : { input: toJson(input) };
}

/** What JSON (the database and the event stream) keeps of a value, so both show the same thing. */
export function toJson(value: unknown): unknown {
  if (value === undefined) return null;
  try {
    return JSON.parse(JSON.stringify(value)) ?? null;
  } catch {
    return String(value);
  }
}
