import { AISDKError, type LanguageModelV3 } from '@ai-sdk/provider';
import { type ModelMessage, stepCountIs, streamText, type Tool } from 'ai';
import type { ChatHistoryEntry } from '../../db/schema/index.js';
import { ApiError } from '../../http/errors.js';
import { withBoundedRetries } from '../../llm/bounded-retries.js';
import { providerFailure } from '../../llm/provider-errors.js';
import type { TurnTiming } from '../../telemetry/turn-timing.js';
import { IdleWatchdog, pausingWatchdog } from '../../turns/watchdog.js';
import type { Usage } from '../credits/service.js';

/** Enough steps for a few knowledge searches or tool calls before the document is written. */
const MAX_STEPS = 6;
const MAX_TOOL_CONTENT = 4000;

export interface ModelRunRequest {
  model: LanguageModelV3;
  system: string;
  messages: ModelMessage[];
  tools: Record<string, Tool>;
  /** The whole run's limit (blocking requests); none for streams. */
  deadlineMs?: number;
  /** A model silent this long (no stream part while no tool runs) fails the run. */
  idleMs: number;
  onChunk?: (text: string) => void;
  signal?: AbortSignal;
  /** A blocking request's clock: the model request, its first chunk and its end are marked. */
  timing?: TurnTiming;
}

export interface ModelRunResult {
  text: string;
  /** Tool calls made while writing, in order, for the artifact's chat_history. */
  toolEntries: ChatHistoryEntry[];
  usage: Usage;
  /** Why the model stopped (its last step), for the generation's span. */
  finishReason?: string;
  /** A structured generation's JSON value (settled after the run). */
  parsed?: unknown;
}

/**
 * Streams one generation through the AI SDK (the same path for blocking and streaming callers):
 * every text delta goes to `onChunk`, and the returned text is exactly their concatenation.
 * A model failure, a broken stream, a silent model or the deadline throws an ApiError (500).
 */
export async function runModel(request: ModelRunRequest): Promise<ModelRunResult> {
  const idle = new AbortController();
  const watchdog = new IdleWatchdog(request.idleMs, () => idle.abort(new Error('idle')));
  const signals = [idle.signal];
  const deadline = request.deadlineMs === undefined ? null : AbortSignal.timeout(request.deadlineMs);
  if (deadline) signals.push(deadline);
  if (request.signal) signals.push(request.signal);
  const signal = AbortSignal.any(signals);
  const hasTools = Object.keys(request.tools).length > 0;
  watchdog.start();
  request.timing?.modelRequest();
  const result = streamText({
    model: withBoundedRetries(request.model),
    system: request.system,
    messages: request.messages,
    ...(hasTools
      ? { tools: pausingWatchdog(request.tools, watchdog), stopWhen: stepCountIs(MAX_STEPS) }
      : {}),
    // Retried by withBoundedRetries: a failing provider is reported within seconds.
    maxRetries: 0,
    abortSignal: signal,
    // Errors arrive as `error` parts below; the default handler would only log them to the console.
    onError: () => {},
  });

  let text = '';
  const toolEntries: ChatHistoryEntry[] = [];
  const parameters = new Map<string, unknown>();
  let usage: Usage = { inputTokens: 0, outputTokens: 0 };
  let finishReason: string | undefined;
  try {
    for await (const part of result.fullStream) {
      watchdog.touch();
      switch (part.type) {
        case 'text-delta':
          if (part.text === '') break;
          request.timing?.modelChunk();
          text += part.text;
          request.onChunk?.(part.text);
          break;
        case 'tool-call':
          request.timing?.modelChunk();
          parameters.set(part.toolCallId, part.input);
          break;
        case 'tool-result':
          toolEntries.push(toolEntry(part.toolName, part.toolCallId, part.input, part.output, null));
          break;
        case 'tool-error':
          toolEntries.push(
            toolEntry(part.toolName, part.toolCallId, part.input, null, errorMessage(part.error)),
          );
          break;
        case 'error':
          throw part.error;
        case 'abort':
          throw signal.reason ?? new Error('aborted');
        case 'finish':
          finishReason = part.finishReason;
          usage = {
            inputTokens: part.totalUsage.inputTokens ?? 0,
            outputTokens: part.totalUsage.outputTokens ?? 0,
          };
          break;
      }
    }
  } catch (error) {
    if (idle.signal.aborted) {
      throw new ApiError(
        500,
        'generation_timed_out',
        `The model did not respond for ${Math.round(request.idleMs / 1000)} s`,
      );
    }
    throw generationError(error, deadline?.aborted === true);
  } finally {
    watchdog.stop();
    request.timing?.modelEnded();
  }
  if (text.trim() === '') {
    throw new ApiError(500, 'generation_failed', 'The model returned no content for the artifact');
  }
  return { text, toolEntries, usage, finishReason };
}

function toolEntry(
  toolName: string,
  toolCallId: string,
  input: unknown,
  output: unknown,
  error: string | null,
): ChatHistoryEntry {
  const shown = error ?? (typeof output === 'string' ? output : JSON.stringify(output ?? null));
  return {
    role: 'tool',
    content: shown.length > MAX_TOOL_CONTENT ? `${shown.slice(0, MAX_TOOL_CONTENT)}…` : shown,
    tool_name: toolName,
    tool_call_id: toolCallId,
    parameters: input ?? {},
    error,
  };
}

function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  return typeof error === 'string' ? error : JSON.stringify(error);
}

function generationError(error: unknown, timedOut: boolean): ApiError {
  if (error instanceof ApiError) return error;
  if (timedOut) {
    return new ApiError(500, 'generation_timed_out', 'The model did not finish the artifact in time');
  }
  // Never the provider's own words (see providerFailure): they reach callers and webhook payloads.
  const provider = providerFailure(error);
  const reason =
    provider ??
    (AISDKError.isInstance(error)
      ? `its answer could not be used (${error.name})`
      : errorMessage(error).replace(/\s+/g, ' ').slice(0, 300));
  const failure = new ApiError(
    500,
    'generation_failed',
    `The model failed while generating the artifact: ${reason}`,
  );
  // The original stays attached for the log of whoever reports this failure.
  return Object.assign(failure, { cause: error });
}
