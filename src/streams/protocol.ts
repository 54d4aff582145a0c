import { type Static, type TSchema, Type } from '@sinclair/typebox';
import type { ApiError } from '../http/errors.js';
import { Nullable } from '../http/schemas.js';
import { ChatView, MessageView, PendingApproval } from '../modules/chats/schemas.js';

/**
 * The Server-Sent Events of the service, declared once (spec 6). The TypeScript event types, the
 * AsyncAPI document (src/modules/operations/asyncapi.ts), the OpenAPI descriptions of the streaming
 * endpoints and the final-event check are all derived from these tables. On the wire each event is
 * `event: <name>`, `data: <payload JSON>` and `id: <seq>` (its number in the stream, from 1).
 */
export interface EventSpec {
  summary: string;
  payload: TSchema;
  /** The stream's last event: nothing follows it. */
  final?: true;
}

/** A chat turn's events (spec 6.1): `POST /api/v2/chats...` with `stream: true` and `GET /chats/:id/stream`. */
export const ChatStreamEvents = {
  queued: {
    summary:
      'First event of a message sent with `if_busy: "enqueue"` while a turn runs: it waits, `position` 1 being next (issue 17). The events of its own turn follow when it starts',
    payload: Type.Object({ message_id: Type.Integer(), position: Type.Integer({ minimum: 1 }) }),
  },
  content: {
    summary: 'A chunk of assistant text; with `response_format`, the whole reply once validated (one event)',
    payload: Type.Object({ content: Type.String() }),
  },
  tool_start: {
    summary: 'A tool call begins',
    payload: Type.Object({
      tool_call_id: Type.String(),
      tool_name: Type.String(),
      parameters: Type.Record(Type.String(), Type.Unknown()),
    }),
  },
  approval_required: {
    summary:
      "After `tool_start`, for a tool the chat's agent lists in `tools_requiring_approval`: the turn waits (the stream stays open) until POST /api/v2/chats/:id/approvals/:tool_call_id decides, or `expires_at` passes (a denial)",
    payload: PendingApproval,
  },
  tool_result: {
    summary: 'A tool call ended (or was denied: `error` holds the reason)',
    payload: Type.Object({
      tool_call_id: Type.String(),
      tool_name: Type.String(),
      result: Type.Unknown(),
      error: Nullable(Type.Object({ message: Type.String() })),
      execution_time_ms: Type.Integer(),
    }),
  },
  done: {
    summary:
      'The reply is complete, with its `citations` (`[]` without) and, with `response_format`, `parsed`; on POST /api/v2/chats also the chat',
    payload: Type.Object({ message: MessageView, chat: Type.Optional(ChatView) }),
    final: true,
  },
  error: {
    summary: 'The turn failed; code is the HTTP status it maps to; on create also the chat that was kept',
    payload: Type.Object({
      message: Type.String(),
      code: Type.Integer(),
      /** The failure's stable code, as in the blocking answer's `response.error` (`turn_in_progress`, `queue_full`, `dequeued`, `insufficient_credits`...). */
      error: Type.Optional(Type.String()),
      /** A 409 `turn_in_progress`: the turn that holds the chat, as in the blocking answer. */
      running_turn: Type.Optional(Type.Object({ id: Type.Integer(), stream_url: Type.String() })),
      chat: Type.Optional(ChatView),
    }),
    final: true,
  },
} satisfies Record<string, EventSpec>;

/** An artifact generation's or refinement's events (spec 6.2): `.../artifacts/stream` and `.../refine_stream`. */
export const ArtifactStreamEvents = {
  chunk: {
    summary: 'A chunk of artifact content; with `response_format`, the whole validated JSON (one event)',
    payload: Type.Object({ content: Type.String(), done: Type.Literal(false) }),
  },
  done: {
    summary: 'The artifact is saved',
    payload: Type.Object({
      artifact_id: Type.Union([Type.Integer(), Type.String()]),
      done: Type.Literal(true),
    }),
    final: true,
  },
  error: {
    summary: 'Generation failed; nothing half-written was saved as finished',
    payload: Type.Object({
      error: Type.Object({
        message: Type.String(),
        code: Type.String(),
        details: Type.Record(Type.String(), Type.Array(Type.String())),
      }),
    }),
    final: true,
  },
} satisfies Record<string, EventSpec>;

type EventsOf<T extends Record<string, EventSpec>> = {
  [K in keyof T & string]: { name: K; data: Static<T[K]['payload']> };
}[keyof T & string];

/** A chat turn's event as published. */
export type TurnEvent = EventsOf<typeof ChatStreamEvents>;
export type TurnEventName = TurnEvent['name'];
/** An artifact stream's event as published. */
export type ArtifactEvent = EventsOf<typeof ArtifactStreamEvents>;
/** Any event of any stream of the service. */
export type StreamEventOf = TurnEvent | ArtifactEvent;

const FINAL_EVENTS = new Set(
  [ChatStreamEvents, ArtifactStreamEvents].flatMap((events) =>
    Object.entries(events as Record<string, EventSpec>)
      .filter(([, spec]) => spec.final)
      .map(([name]) => name),
  ),
);

/** Whether an event ends its stream (every stream of the service ends with one). */
export const isFinalEvent = (name: string): boolean => FINAL_EVENTS.has(name);

// ---- builders of the final events ----

export const chatDone = (message: MessageView, chat?: ChatView): TurnEvent => ({
  name: 'done',
  data: chat ? { message, chat } : { message },
});

export const chatError = (message: string, code: number, chat?: ChatView): TurnEvent => ({
  name: 'error',
  data: { message, code, ...(chat ? { chat } : {}) },
});

/** The `error` event of a failure or refusal: the blocking answer's status, code and `running_turn`. */
export const chatFailure = (error: ApiError, chat?: ChatView): TurnEvent => {
  const runningTurn = error.extra.running_turn as { id: number; stream_url: string } | undefined;
  return {
    name: 'error',
    data: {
      message: error.message,
      code: error.status,
      error: error.code,
      ...(runningTurn ? { running_turn: runningTurn } : {}),
      ...(chat ? { chat } : {}),
    },
  };
};

export const artifactDone = (artifactId: number): ArtifactEvent => ({
  name: 'done',
  data: { artifact_id: artifactId, done: true },
});

/** The v1 error object of the failure, as the event's payload. */
export const artifactError = (error: ApiError): ArtifactEvent => ({
  name: 'error',
  data: { error: { message: error.message, code: error.code, details: error.details } },
});

/** "the events `a`, `b` and `c`", for the OpenAPI descriptions of the streaming endpoints. */
export function eventList(events: Record<string, EventSpec>): string {
  const names = Object.keys(events).map((name) => `\`${name}\``);
  return names.length === 1 ? names[0] : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
}
