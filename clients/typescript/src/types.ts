import type { components } from './schema.js';

type Schemas = components['schemas'];
export type Chat = Schemas['Chat'];
export type Message = Schemas['Message'];
export type ToolExecution = Schemas['ToolExecution'];
/** A tool call waiting for a decision (`message.pending_approvals`, the `approval_required` event). */
export type PendingApproval = Schemas['PendingApproval'];
export type Pagination = Schemas['Pagination'];
export type Artifact = Schemas['Artifact'];
export type Project = Schemas['Project'];
export type Document = Schemas['Document'];
export type CreateChatBody = Omit<Schemas['CreateChatBody'], 'stream'>;
/** Optional parts of a message (issue 18): attachments and a JSON Schema for the reply. */
export type MessageExtras = Pick<Schemas['SendMessageBody'], 'attachments' | 'response_format'>;
export type Citation = Schemas['Citation'];
export type Attachment = Schemas['Attachment'];
export type GenerateBody = Schemas['StreamGenerateBody'];
export type RefineBody = Schemas['StreamRefineBody'];

/** One event of a chat turn's stream (spec 6.1); `id` is its sequence number in the turn. */
export type ChatStreamEvent =
  /** `if_busy: "enqueue"` on a busy chat: the message waits (position 1 is next); its turn's events follow. */
  | { id: number; event: 'queued'; data: { message_id: number; position: number } }
  | { id: number; event: 'content'; data: { content: string } }
  | {
      id: number;
      event: 'tool_start';
      data: { tool_call_id: string; tool_name: string; parameters: Record<string, unknown> };
    }
  /** After `tool_start`, for a tool the agent gates: the turn waits for `chats.decide` (or `expires_at`). */
  | { id: number; event: 'approval_required'; data: PendingApproval }
  | {
      id: number;
      event: 'tool_result';
      data: {
        tool_call_id: string;
        tool_name: string;
        result: unknown;
        error: unknown;
        execution_time_ms: number;
      };
    }
  /** The reply is complete; a stream that created the chat carries the chat too. */
  | { id: number; event: 'done'; data: { message: Message; chat?: Chat } }
  /** The turn failed: `code` is the HTTP status it maps to (402, 409, 500, 504...). */
  | { id: number; event: 'error'; data: { message: string; code: number; error?: string; chat?: Chat } };

/** One event of an artifact generation or refinement stream. */
export type ArtifactStreamEvent =
  | { id: number; event: 'chunk'; data: { content: string; done: false } }
  | { id: number; event: 'done'; data: { artifact_id: number; done: true } }
  | {
      id: number;
      event: 'error';
      data: { error: { message: string; code: string; details: Record<string, unknown> } };
    };

interface GeneratedData {
  name: string;
  artifact_id: number;
  artifact_type_slug: string;
  project_id: number;
  api_async_create_event_id: string;
  chat_id?: number;
}

/** A verified webhook payload (docs/webhooks.md, /asyncapi.json). */
export type WebhookEvent =
  | { event_name: 'artifact_generated'; event_data: GeneratedData }
  | { event_name: 'artifact_refined'; event_data: GeneratedData }
  | {
      event_name: 'artifact_generation_failed';
      event_data: {
        api_async_create_event_id: string;
        project_id: number;
        artifact_type_slug: string;
        reason?: string;
      };
    }
  | {
      event_name: 'chat_approval_required';
      event_data: PendingApproval & { chat_id: number; message_id: number; project_id: number };
    }
  | { event_name: 'webhook_test'; event_data: { project_id: number; webhook_id: number; message: string } };
