import { type TSchema, Type } from '@sinclair/typebox';
import { ArtifactStreamEvents, ChatStreamEvents } from '../../streams/protocol.js';

// The SSE events come from their one declaration (src/streams/protocol.ts); the SSE `id:` line
// carries each event's sequence number. Webhook payloads (spec 6.3) are declared here.
const chatEvents = ChatStreamEvents;
const artifactEvents = ArtifactStreamEvents;

const generatedData = Type.Object({
  name: Type.String(),
  artifact_id: Type.Integer(),
  artifact_type_slug: Type.String(),
  project_id: Type.Integer(),
  api_async_create_event_id: Type.String({ format: 'uuid' }),
  chat_id: Type.Optional(Type.Integer({ description: 'Only when the artifact has an associated chat' })),
});

const webhookEvents: Record<string, { summary: string; payload: TSchema }> = {
  artifact_generated: {
    summary: 'An artifact was generated',
    payload: Type.Object({ event_name: Type.Literal('artifact_generated'), event_data: generatedData }),
  },
  artifact_refined: {
    summary: 'An artifact was refined',
    payload: Type.Object({ event_name: Type.Literal('artifact_refined'), event_data: generatedData }),
  },
  artifact_generation_failed: {
    summary: 'A fire-and-forget generation or refinement failed',
    payload: Type.Object({
      event_name: Type.Literal('artifact_generation_failed'),
      event_data: Type.Object({
        api_async_create_event_id: Type.String({ format: 'uuid' }),
        project_id: Type.Integer(),
        artifact_type_slug: Type.String(),
        reason: Type.Optional(
          Type.String({
            description:
              "Why it failed, e.g. Cancelled by the client; a model provider's failure by its HTTP status only, never its text",
          }),
        ),
      }),
    }),
  },
  chat_turn_completed: {
    summary:
      'A chat turn ended with a reply (a reply stopped by a cancel request included); project and organization webhooks',
    payload: Type.Object({
      event_name: Type.Literal('chat_turn_completed'),
      event_data: Type.Object({
        chat_id: Type.Integer(),
        message_id: Type.Integer({ description: 'The assistant message' }),
        project_id: Type.Integer(),
        usage: Type.Object({
          input_tokens: Type.Integer(),
          output_tokens: Type.Integer(),
          credits: Type.Number(),
        }),
      }),
    }),
  },
  chat_turn_failed: {
    summary: 'A chat turn failed (its messages have status failed); project and organization webhooks',
    payload: Type.Object({
      event_name: Type.Literal('chat_turn_failed'),
      event_data: Type.Object({
        chat_id: Type.Integer(),
        message_id: Type.Integer({ description: 'The assistant message' }),
        project_id: Type.Integer(),
        error: Type.Object({
          code: Type.String({
            description:
              'model_error, model_timeout, database_unavailable, turn_cancelled (server shutdown), turn_interrupted (its server died), ...',
          }),
          message: Type.String({ description: "For people; never the model provider's own text" }),
        }),
      }),
    }),
  },
  chat_approval_required: {
    summary:
      "A chat turn waits for a decision on a tool call (the agent's tools_requiring_approval): POST /api/v2/chats/:id/approvals/:tool_call_id; project and organization webhooks",
    payload: Type.Object({
      event_name: Type.Literal('chat_approval_required'),
      event_data: Type.Object({
        chat_id: Type.Integer(),
        message_id: Type.Integer({ description: 'The assistant message (the reply waiting)' }),
        project_id: Type.Integer(),
        tool_call_id: Type.String(),
        tool_name: Type.String(),
        parameters: Type.Record(Type.String(), Type.Unknown()),
        expires_at: Type.String({
          description: 'Undecided then, the call counts as denied (APPROVAL_TIMEOUT_MS after the request)',
        }),
      }),
    }),
  },
  document_processed: {
    summary: "A document of the organization's knowledge base is searchable; organization webhooks only",
    payload: Type.Object({
      event_name: Type.Literal('document_processed'),
      event_data: Type.Object({
        document_id: Type.Integer(),
        name: Type.String(),
        processing_status: Type.Literal('completed'),
        error: Type.Null(),
      }),
    }),
  },
  document_failed: {
    summary: 'A document could not be processed; organization webhooks only',
    payload: Type.Object({
      event_name: Type.Literal('document_failed'),
      event_data: Type.Object({
        document_id: Type.Integer(),
        name: Type.String(),
        processing_status: Type.Literal('failed'),
        error: Type.String({ description: "The document's processing_error" }),
      }),
    }),
  },
  webhook_test: {
    summary:
      'Sent by POST /api/v1/projects/:id/webhooks/:webhook_id/test (and /api/v1/webhooks/:id/test), whatever the subscription',
    payload: Type.Object({
      event_name: Type.Literal('webhook_test'),
      event_data: Type.Object({
        project_id: Type.Optional(Type.Integer({ description: 'Absent for an organization webhook' })),
        webhook_id: Type.Integer(),
        message: Type.String(),
      }),
    }),
  },
};

function messagesOf(prefix: string, events: Record<string, { summary: string; payload: TSchema }>) {
  return Object.fromEntries(
    Object.entries(events).map(([name, event]) => [
      `${prefix}_${name}`,
      {
        name,
        title: name,
        summary: event.summary,
        contentType: 'application/json',
        payload: structuredClone(event.payload),
      },
    ]),
  );
}

function channel(address: string, description: string, prefix: string, events: Record<string, unknown>) {
  return {
    address,
    description,
    messages: Object.fromEntries(
      Object.keys(events).map((name) => [name, { $ref: `#/components/messages/${prefix}_${name}` }]),
    ),
  };
}

function receive(channelName: string, summary: string, events: Record<string, unknown>) {
  return {
    action: 'receive',
    summary,
    channel: { $ref: `#/channels/${channelName}` },
    messages: Object.keys(events).map((name) => ({ $ref: `#/channels/${channelName}/messages/${name}` })),
  };
}

/** AsyncAPI 3.0: every SSE event of chat and artifact streams and every webhook payload. */
export function asyncApiDocument(publicBaseUrl: string) {
  const url = new URL(publicBaseUrl);
  return {
    asyncapi: '3.0.0',
    info: {
      title: 'Scriptorium events',
      version: '1.0.0',
      description:
        'Server-Sent Events of chat and artifact streams (each event: `event:`, `data:` and an `id:` sequence line) and webhook deliveries (Standard Webhooks signatures).',
    },
    defaultContentType: 'application/json',
    servers: {
      api: {
        host: url.host,
        protocol: url.protocol.replace(':', ''),
        description: 'The Scriptorium service',
      },
    },
    channels: {
      chatStream: channel(
        '/api/v2/chats/{chat_id}/stream',
        "POST /api/v2/chats and POST /api/v2/chats/:id/messages with stream: true, and GET /api/v2/chats/:id/stream to reattach (after the `Last-Event-ID` header or `?after=`, from any server process). `id:` counts the turn's events from 1; an event the server adds itself (an `error` for a turn whose process stopped) repeats the last id delivered. A POST repeated with the same `Idempotency-Key` and body replays the same stream from its start.",
        'chat',
        chatEvents,
      ),
      artifactStream: channel(
        '/api/v1/artifact_types/{artifact_type_slug}/artifacts/stream',
        'POST .../artifacts/stream and .../artifacts/:artifact_id/refine_stream. `id:` counts the events from 1; a POST repeated with the same `Idempotency-Key` and body replays the same stream from its start instead of generating again.',
        'artifact',
        artifactEvents,
      ),
      webhooks: channel(
        '/webhook-receiver',
        "POSTed to each subscribed webhook's URL (project webhooks: that project's events; organization webhooks, /api/v1/webhooks: every project's and the organization's own); headers webhook-id, webhook-timestamp, webhook-signature.",
        'webhook',
        webhookEvents,
      ),
    },
    operations: {
      receiveChatEvents: receive('chatStream', 'Chat turn events, in order', chatEvents),
      receiveArtifactEvents: receive(
        'artifactStream',
        'Artifact generation events, in order',
        artifactEvents,
      ),
      receiveWebhooks: receive('webhooks', 'Webhook deliveries (at least once)', webhookEvents),
    },
    components: {
      messages: {
        ...messagesOf('chat', chatEvents),
        ...messagesOf('artifact', artifactEvents),
        ...messagesOf('webhook', webhookEvents),
      },
    },
  };
}
