import { type Static, Type } from '@sinclair/typebox';
import { PageQuery, Pagination } from '../../http/pagination.js';
import { Id, Nullable, Timestamp } from '../../http/schemas.js';
import { ResponseFormat } from '../../turns/structured-output.js';
import { AttachmentsInput, AttachmentView } from './attachments.js';

export const ToolExecutionView = Type.Object(
  {
    id: Type.Integer(),
    tool_name: Type.String(),
    tool_call_id: Type.String(),
    status: Type.String({
      description:
        '`completed`; `failed` when the tool threw (see `error`); `denied` when its call needed an approval that was refused or not given within APPROVAL_TIMEOUT_MS: the tool did not run, and `error.message` (with the reason) is what the model received',
    }),
    parameters: Type.Record(Type.String(), Type.Unknown()),
    result: Type.Unknown(),
    error: Nullable(Type.Object({ message: Type.String() })),
    execution_time_ms: Type.Integer(),
  },
  { title: 'ToolExecution' },
);
export type ToolExecutionView = Static<typeof ToolExecutionView>;

export const MessageUsage = Type.Object(
  {
    input_tokens: Type.Integer(),
    output_tokens: Type.Integer(),
    credits: Type.Number(),
  },
  {
    title: 'MessageUsage',
    description: 'Assistant messages: tokens the model reported (all steps) and the credits charged',
  },
);

export const MessageTiming = Type.Object(
  {
    queued_ms: Type.Number({
      description: 'Request arrival to the turn running (checks, messages and lease written)',
    }),
    overhead_ms: Type.Number({
      description:
        "Time the service added before the first token: request arrival to the model request, plus the model's first chunk to the first event written",
    }),
    model_first_token_ms: Nullable(
      Type.Number({ description: "Model request to the model's first chunk; null when it sent nothing" }),
    ),
    total_ms: Type.Number({ description: 'Request arrival to the reply finished' }),
  },
  {
    description:
      'Only on a freshly produced reply (the `done` event, the blocking answer), never in history: where the time went, in milliseconds',
  },
);
export type MessageTiming = Static<typeof MessageTiming>;

export const Citation = Type.Object(
  {
    marker: Type.Integer({ minimum: 1, description: 'The `[n]` marker in the content' }),
    document_id: Type.Integer(),
    document_name: Type.String(),
    chunk_id: Nullable(Type.Integer({ description: 'The passage (null when it no longer exists)' })),
    quote: Type.String({ description: "The passage's text (at most 500 characters)" }),
  },
  { title: 'Citation' },
);

export const PendingApproval = Type.Object(
  {
    tool_call_id: Type.String(),
    tool_name: Type.String(),
    parameters: Type.Record(Type.String(), Type.Unknown()),
    expires_at: Timestamp,
  },
  {
    title: 'PendingApproval',
    description:
      'A tool call waiting for POST /api/v2/chats/:id/approvals/:tool_call_id; undecided at `expires_at`, it counts as denied',
  },
);
export type PendingApproval = Static<typeof PendingApproval>;

export const MessageView = Type.Object(
  {
    id: Type.Integer(),
    role: Type.Union([Type.Literal('assistant'), Type.Literal('user')]),
    content: Type.String(),
    model: Nullable(Type.String({ description: 'The model name; null for user messages' })),
    created_at: Timestamp,
    tool_executions: Type.Array(ToolExecutionView),
    status: Type.Union(
      [
        Type.Literal('completed'),
        Type.Literal('requires_action'),
        Type.Literal('cancelled'),
        Type.Literal('failed'),
      ],
      {
        description:
          '`completed`; `requires_action` for a reply waiting for tool approvals (see `pending_approvals`; only in the answer of a blocking request, never in history); `cancelled` for a reply stopped by POST /chats/:id/cancel; `failed` on both messages of a turn that failed (a model or tool error, the database or the server going away): the reply holds what was generated, and the message was not answered',
      },
    ),
    pending_approvals: Type.Optional(
      Type.Array(PendingApproval, {
        description:
          'With `status: "requires_action"`: the tool calls waiting for a decision; `content` and `tool_executions` are the reply so far',
      }),
    ),
    usage: Type.Optional(MessageUsage),
    timing: Type.Optional(MessageTiming),
    cancelled: Type.Optional(
      Type.Literal(true, {
        description: 'Present on a reply stopped by POST /chats/:id/cancel: content is what was generated',
      }),
    ),
    citations: Type.Array(Citation, {
      description:
        'Assistant messages: the passages of `knowledge_search` the reply cites with `[n]` markers, in order of first appearance; `[]` when none',
    }),
    attachments: Type.Array(AttachmentView, {
      description:
        'User messages: what was sent with the message (image bytes never; see GET .../attachments/:id); `[]` when none',
    }),
    parsed: Type.Optional(
      Type.Unknown({
        description: 'A reply to a request with `response_format`: the JSON value its content holds',
      }),
    ),
  },
  { title: 'Message' },
);
export type MessageView = Static<typeof MessageView>;

export const ChatView = Type.Object(
  {
    id: Type.Integer(),
    title: Type.String(),
    project_id: Type.Integer(),
    model_configuration_id: Type.Integer(),
    agent_id: Nullable(Type.Integer()),
    created_at: Timestamp,
    message_count: Type.Optional(Type.Integer({ description: 'Only in GET /chats/:id' })),
  },
  { title: 'Chat' },
);
export type ChatView = Static<typeof ChatView>;

/** The largest user message: the 1 MiB of every other JSON body (the chat routes' own limit is for attachments). */
export const MAX_CONTENT_CHARS = 1_048_576;

const Content = Type.String({
  minLength: 1,
  maxLength: MAX_CONTENT_CHARS,
  description: `The user message (at most ${MAX_CONTENT_CHARS} characters); a skill runs from its slash command`,
});
const Stream = Type.Boolean({ default: false, description: 'Answer as text/event-stream (spec 6.1)' });

export const CreateChatBody = Type.Object(
  {
    project_id: Id({ description: 'Sets knowledge scope and credits used' }),
    agent_id: Type.Optional(Id()),
    model_configuration_id: Type.Optional(
      Id({ description: "Default: the agent's, else the organization's default model" }),
    ),
    content: Type.Optional(Content),
    stream: Type.Optional(Stream),
    response_format: Type.Optional(ResponseFormat),
    attachments: Type.Optional(AttachmentsInput),
  },
  { title: 'CreateChatBody' },
);
export type CreateChatBody = Static<typeof CreateChatBody>;

export const IfBusy = Type.Union(
  [Type.Literal('reject'), Type.Literal('enqueue'), Type.Literal('interrupt')],
  {
    description:
      'Default `reject`. What to do when a turn of the chat is running: `reject` answers 409 (with `response.running_turn`); `enqueue` stores the message and runs it when the chat is free, in arrival order (at most 10 waiting, else 409 `queue_full`); `interrupt` cancels the running turn (its partial reply kept, as POST /cancel does) and runs this message next. A free chat runs the message at once whatever the policy.',
  },
);

export const SendMessageBody = Type.Object(
  {
    content: Content,
    stream: Type.Optional(Stream),
    if_busy: Type.Optional(IfBusy),
    response_format: Type.Optional(ResponseFormat),
    attachments: Type.Optional(AttachmentsInput),
  },
  { title: 'SendMessageBody' },
);
export type SendMessageBody = Static<typeof SendMessageBody>;

export const ChatListQuery = Type.Composite([
  PageQuery,
  Type.Object({ project_id: Type.Optional(Id({ description: 'Only chats of this project' })) }),
]);
export type ChatListQuery = Static<typeof ChatListQuery>;

export const ChatCreated = Type.Object(
  { chat: ChatView, message: Type.Optional(MessageView) },
  { title: 'ChatCreated' },
);
export const ChatRead = Type.Object({ chat: ChatView }, { title: 'ChatRead' });
export const MessageCreated = Type.Object({ message: MessageView }, { title: 'MessageCreated' });
export const ChatList = Type.Object(
  { chats: Type.Array(ChatView), pagination: Pagination },
  { title: 'ChatList' },
);
export const MessageList = Type.Object(
  { messages: Type.Array(MessageView), pagination: Pagination },
  { title: 'MessageList' },
);

/** The 409 of POST /chats/:id/messages: a busy chat (`turn_in_progress`, naming the running turn), `queue_full`, `dequeued`. */
export const BusyChatError = Type.Object(
  {
    status: Type.Literal('error'),
    response: Type.Object(
      {
        code: Type.Integer({ description: 'The HTTP status' }),
        error: Type.String({ description: '`turn_in_progress`, `queue_full` or `dequeued`' }),
        message: Type.String(),
        running_turn: Type.Optional(
          Type.Object(
            {
              id: Type.Integer({ description: 'The running turn' }),
              stream_url: Type.String({
                description: 'Its stream: the path of GET /api/v2/chats/:id/stream',
              }),
            },
            { description: 'With `turn_in_progress`: the turn holding the chat' },
          ),
        ),
      },
      { additionalProperties: true },
    ),
  },
  { title: 'BusyChatError' },
);
