import createClient, { type Client } from 'openapi-fetch';
import { ScriptoriumError } from './errors.js';
import type { components, paths } from './schema.js';
import { type ResumeOptions, resumableStream } from './streams.js';
import type {
  ArtifactStreamEvent,
  Chat,
  ChatStreamEvent,
  CreateChatBody,
  GenerateBody,
  Message,
  MessageExtras,
  RefineBody,
} from './types.js';

export interface ScriptoriumClientOptions {
  /** e.g. `http://127.0.0.1:3000` */
  baseUrl: string;
  /** `sk_org_...`, `sk_usr_...` (or `sk_adm_...` for /api/v1/admin). */
  apiKey: string;
  /** A custom fetch (tests, proxies). */
  fetch?: typeof globalThis.fetch;
  /** Reconnection of dropped streams. */
  reconnect?: Omit<ResumeOptions, 'signal'>;
}

export interface RequestOptions {
  /** Sent as `Idempotency-Key`; streams get a random one when omitted (it is what makes them resumable). */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** Sending a message: also what to do when the chat is busy (`if_busy`, default `reject`: 409). */
export interface SendOptions extends RequestOptions {
  ifBusy?: 'reject' | 'enqueue' | 'interrupt';
}

const ifBusyOf = (opts: SendOptions) => (opts.ifBusy ? { if_busy: opts.ifBusy } : {});

type Schemas = components['schemas'];

/** Throws the answer's error as a ScriptoriumError, else returns its data. */
function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok) {
    throw ScriptoriumError.fromBody(result.response.status, result.error ?? null, result.response.headers);
  }
  return result.data as T;
}

const idempotency = (key: string | undefined): { 'Idempotency-Key'?: string } =>
  key ? { 'Idempotency-Key': key } : {};

/**
 * The typed Scriptorium client: `api` is the generated low-level client (every operation of
 * /openapi.json, typed); `chats` and `artifacts` are the hand-written layer that unwraps envelopes,
 * throws `ScriptoriumError`, and turns streams into async iterators that survive dropped connections.
 */
export function createScriptoriumClient(options: ScriptoriumClientOptions) {
  const baseUrl = options.baseUrl.replace(/\/+$/, '');
  const doFetch = options.fetch ?? globalThis.fetch;
  const api: Client<paths> = createClient<paths>({
    baseUrl,
    headers: { authorization: `Bearer ${options.apiKey}` },
    fetch: (request) => doFetch(request),
  });

  /** A raw streaming request; the generated client would try to parse the event stream as JSON. */
  const post = (
    path: string,
    body: unknown,
    headers: Record<string, string | undefined>,
    signal?: AbortSignal,
  ) =>
    doFetch(`${baseUrl}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${options.apiKey}`,
        'content-type': 'application/json',
        accept: 'text/event-stream',
        ...(Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<
          string,
          string
        >),
      },
      body: JSON.stringify(body),
      signal,
    });
  const resumeHeader = (after: number | null): Record<string, string> =>
    after === null ? {} : { 'Last-Event-ID': String(after) };
  const streamOptions = (signal?: AbortSignal): ResumeOptions => ({ ...options.reconnect, signal });

  const chats = {
    /** Creates a chat; with `content`, waits for the first reply (`message`). */
    async create(
      body: CreateChatBody,
      opts: RequestOptions = {},
    ): Promise<{ chat: Chat; message: Message | undefined }> {
      const data = unwrap(
        await api.POST('/api/v2/chats', {
          body: { ...body, stream: false },
          params: { header: idempotency(opts.idempotencyKey) },
          signal: opts.signal,
        }),
      ) as Schemas['ChatCreatedResponse'];
      return { chat: data.response.chat, message: data.response.message };
    },

    /** Sends a message (with `attachments` and `response_format` in `extra`) and waits for the reply. */
    async send(
      chatId: number,
      content: string,
      opts: SendOptions & { extra?: MessageExtras } = {},
    ): Promise<Message> {
      const data = unwrap(
        await api.POST('/api/v2/chats/{id}/messages', {
          params: { path: { id: chatId }, header: idempotency(opts.idempotencyKey) },
          body: { ...opts.extra, content, stream: false, ...ifBusyOf(opts) },
          signal: opts.signal,
        }),
      ) as Schemas['MessageCreatedResponse'];
      return data.response.message;
    },

    /** Answers the chat's last user message again; the new reply takes the last reply's place. */
    async regenerate(chatId: number, messageId: number, opts: RequestOptions = {}): Promise<Message> {
      const data = unwrap(
        await api.POST('/api/v2/chats/{id}/messages/{message_id}/regenerate', {
          params: { path: { id: chatId, message_id: messageId }, header: idempotency(opts.idempotencyKey) },
          body: { stream: false },
          signal: opts.signal,
        }),
      ) as Schemas['MessageCreatedResponse'];
      return data.response.message;
    },

    /** The replies a regenerated reply replaced, oldest first. */
    async versions(chatId: number, messageId: number): Promise<Message[]> {
      return unwrap(
        await api.GET('/api/v2/chats/{id}/messages/{message_id}/versions', {
          params: { path: { id: chatId, message_id: messageId } },
        }),
      ).response.versions;
    },

    /** A new chat of the calling key with copies of the history up to `messageId`. */
    async fork(chatId: number, messageId: number): Promise<Chat> {
      return unwrap(
        await api.POST('/api/v2/chats/{id}/fork', {
          params: { path: { id: chatId } },
          body: { message_id: messageId },
        }),
      ).response.chat;
    },

    /** An image attachment's bytes and media type. */
    async attachment(
      chatId: number,
      attachmentId: number,
    ): Promise<{ mediaType: string; bytes: Uint8Array }> {
      const response = await doFetch(`${baseUrl}/api/v2/chats/${chatId}/attachments/${attachmentId}`, {
        headers: { authorization: `Bearer ${options.apiKey}` },
      });
      if (!response.ok) throw await ScriptoriumError.fromResponse(response);
      return {
        mediaType: response.headers.get('content-type') ?? 'application/octet-stream',
        bytes: new Uint8Array(await response.arrayBuffer()),
      };
    },

    async get(chatId: number, opts: RequestOptions = {}): Promise<Chat> {
      const data = unwrap(
        await api.GET('/api/v2/chats/{id}', { params: { path: { id: chatId } }, signal: opts.signal }),
      );
      return data.response.chat;
    },

    /** One page of the key's chats (defaults: page 1, 50 per page). */
    async list(query: { page?: number; page_size?: number; project_id?: number } = {}) {
      return unwrap(await api.GET('/api/v2/chats', { params: { query } })).response;
    },

    /** One page of a chat's history, oldest first. */
    async messages(chatId: number, query: { page?: number; page_size?: number } = {}) {
      return unwrap(await api.GET('/api/v2/chats/{id}/messages', { params: { path: { id: chatId }, query } }))
        .response;
    },

    /**
     * Approves or denies a tool call waiting for approval (`approval_required`, or a message with
     * `status: "requires_action"`); returns the reply once the turn finishes or waits again.
     */
    async decide(
      chatId: number,
      toolCallId: string,
      decision: { approved: boolean; reason?: string },
      opts: RequestOptions = {},
    ): Promise<Message> {
      const data = unwrap(
        await api.POST('/api/v2/chats/{id}/approvals/{tool_call_id}', {
          params: {
            path: { id: chatId, tool_call_id: toolCallId },
            header: idempotency(opts.idempotencyKey),
          },
          body: { ...decision, stream: false },
          signal: opts.signal,
        }),
      ) as Schemas['MessageCreatedResponse'];
      return data.response.message;
    },

    /** Stops the turn in progress; its stream ends with `done`. */
    async cancel(chatId: number): Promise<void> {
      unwrap(await api.POST('/api/v2/chats/{id}/cancel', { params: { path: { id: chatId } } }));
    },

    /**
     * Sends a message and yields the turn's events until `done` or `error`. A dropped connection
     * is resumed through `GET /api/v2/chats/:id/stream` with `Last-Event-ID` (from any server
     * process); before the stream opened, the POST is repeated with the same Idempotency-Key,
     * which never sends the message twice.
     */
    stream(chatId: number, content: string, opts: SendOptions = {}): AsyncGenerator<ChatStreamEvent> {
      const key = opts.idempotencyKey ?? crypto.randomUUID();
      return resumableStream<ChatStreamEvent>((after) => {
        if (after === null) {
          return post(
            `/api/v2/chats/${chatId}/messages`,
            { content, stream: true, ...ifBusyOf(opts) },
            idempotency(key),
            opts.signal,
          );
        }
        return doFetch(`${baseUrl}/api/v2/chats/${chatId}/stream`, {
          headers: { authorization: `Bearer ${options.apiKey}`, ...resumeHeader(after) },
          signal: opts.signal,
        });
      }, streamOptions(opts.signal));
    },

    /**
     * Creates a chat with its first message and yields the turn's events; `done` (and `error`)
     * carry the chat. A dropped connection is resumed by repeating the POST with the same
     * Idempotency-Key and `Last-Event-ID`: no second chat, only the missing events.
     */
    createStream(
      body: CreateChatBody & { content: string },
      opts: RequestOptions = {},
    ): AsyncGenerator<ChatStreamEvent> {
      const key = opts.idempotencyKey ?? crypto.randomUUID();
      return resumableStream<ChatStreamEvent>(
        (after) =>
          post(
            '/api/v2/chats',
            { ...body, stream: true },
            { ...idempotency(key), ...resumeHeader(after) },
            opts.signal,
          ),
        streamOptions(opts.signal),
      );
    },
  };

  const artifacts = {
    /** Generates an artifact and waits for it (201). */
    async generate(slug: string, projectId: number, body: GenerateBody, opts: RequestOptions = {}) {
      const result = await api.POST('/api/v1/artifact_types/{artifact_type_slug}/artifacts', {
        params: {
          path: { artifact_type_slug: slug },
          query: { project_id: projectId },
          header: idempotency(opts.idempotencyKey),
        },
        body: { ...body, fire_and_forget: false },
        signal: opts.signal,
      });
      return unwrap(result) as Schemas['ArtifactWithUrlResponse'];
    },

    async get(slug: string, artifactId: number): Promise<Schemas['Artifact']> {
      const result = await api.GET('/api/v1/artifact_types/{artifact_type_slug}/artifacts/{artifact_id}', {
        params: { path: { artifact_type_slug: slug, artifact_id: artifactId } },
      });
      return unwrap(result).artifact;
    },

    /**
     * Generates an artifact and yields `chunk` events, then `done` (with `artifact_id`) or `error`.
     * Dropped connections are resumed like `chats.createStream`: the same Idempotency-Key with
     * `Last-Event-ID`, so the artifact is generated once.
     */
    stream(
      slug: string,
      projectId: number,
      body: GenerateBody,
      opts: RequestOptions = {},
    ): AsyncGenerator<ArtifactStreamEvent> {
      const key = opts.idempotencyKey ?? crypto.randomUUID();
      const path = `/api/v1/artifact_types/${encodeURIComponent(slug)}/artifacts/stream?project_id=${projectId}`;
      return resumableStream<ArtifactStreamEvent>(
        (after) => post(path, body, { ...idempotency(key), ...resumeHeader(after) }, opts.signal),
        streamOptions(opts.signal),
      );
    },

    /** Refines an artifact as a stream, resumed the same way as `stream`. */
    refineStream(
      slug: string,
      artifactId: number,
      body: RefineBody,
      opts: RequestOptions = {},
    ): AsyncGenerator<ArtifactStreamEvent> {
      const key = opts.idempotencyKey ?? crypto.randomUUID();
      const path = `/api/v1/artifact_types/${encodeURIComponent(slug)}/artifacts/${artifactId}/refine_stream`;
      return resumableStream<ArtifactStreamEvent>(
        (after) => post(path, body, { ...idempotency(key), ...resumeHeader(after) }, opts.signal),
        streamOptions(opts.signal),
      );
    },
  };

  return { api, chats, artifacts };
}

export type ScriptoriumClient = ReturnType<typeof createScriptoriumClient>;
