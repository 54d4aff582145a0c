import { useEffect, useRef, useState } from 'preact/hooks';
import {
  ApiError,
  api,
  describeError,
  get,
  type SseEvent,
  StaleResponse,
  stream,
  streamErrorMessage,
} from '../api';
import { nameOf, useRefs } from '../crud';
import { renderMarkdown } from '../markdown';
import { navigate, searchParam } from '../router';
import { STATE_PREFIX } from '../session';
import { ConfirmButton, ErrorMessage, Field, formatDate, Loading, PageHeader, States, useLoad } from '../ui';

interface ToolCall {
  tool_call_id: string;
  tool_name: string;
  parameters?: unknown;
  result?: unknown;
  error?: unknown;
  execution_time_ms?: number;
  status: 'running' | 'completed' | 'failed';
}

interface Message {
  id: number | string;
  role: 'user' | 'assistant';
  content: string;
  model: string | null;
  created_at?: string;
  tool_executions: any[];
  usage?: { input_tokens: number; output_tokens: number; credits: number };
  cancelled?: boolean;
}

/** A reply being streamed, kept in sessionStorage so a reload picks it up where it was. */
interface Pending {
  chatId: number;
  lastEventId: string | null;
  text: string;
  tools: ToolCall[];
}

const PENDING_ITEM = `${STATE_PREFIX}chat-stream`;

function readPending(): Pending | null {
  try {
    const raw = sessionStorage.getItem(PENDING_ITEM);
    return raw ? (JSON.parse(raw) as Pending) : null;
  } catch {
    return null;
  }
}

function writePending(pending: Pending | null) {
  if (pending) sessionStorage.setItem(PENDING_ITEM, JSON.stringify(pending));
  else sessionStorage.removeItem(PENDING_ITEM);
}

function toolsOf(message: Message): ToolCall[] {
  return message.tool_executions.map((t) => ({
    tool_call_id: t.tool_call_id,
    tool_name: t.tool_name,
    parameters: t.parameters,
    result: t.result,
    error: t.error,
    execution_time_ms: t.execution_time_ms,
    status: t.status === 'failed' || t.error ? 'failed' : 'completed',
  }));
}

function json(value: unknown): string {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function ToolList({ tools }: { tools: ToolCall[] }) {
  if (tools.length === 0) return null;
  return (
    <ul class="plain tool-calls" aria-label="Tool calls">
      {tools.map((t) => (
        <li key={t.tool_call_id} class={`tool tool-${t.status}`} data-testid="tool-call">
          <details>
            <summary>
              <span class="tool-name">{t.tool_name}</span>{' '}
              <span class={`badge badge-${t.status}`}>{t.status === 'running' ? 'running…' : t.status}</span>
              {t.execution_time_ms !== undefined ? (
                <small class="muted"> {t.execution_time_ms} ms</small>
              ) : null}
            </summary>
            <h4>Parameters</h4>
            <pre>{json(t.parameters ?? {})}</pre>
            {t.status !== 'running' ? (
              <>
                <h4>{t.error ? 'Error' : 'Result'}</h4>
                <pre>{json(t.error ?? t.result)}</pre>
              </>
            ) : null}
          </details>
        </li>
      ))}
    </ul>
  );
}

function MessageView({
  message,
  tools,
  streaming,
}: {
  message: Message;
  tools?: ToolCall[];
  streaming?: boolean;
}) {
  const calls = tools ?? toolsOf(message);
  return (
    <article
      class={`message message-${message.role}`}
      aria-label={message.role === 'user' ? 'You' : 'Assistant'}
      data-testid={streaming ? 'streaming-message' : `message-${message.role}`}
    >
      <header class="message-meta">
        <strong>{message.role === 'user' ? 'You' : 'Assistant'}</strong>
        {message.model ? <small class="muted"> · {message.model}</small> : null}
        {message.created_at ? <small class="muted"> · {formatDate(message.created_at)}</small> : null}
        {message.cancelled ? <span class="badge"> cancelled</span> : null}
        {streaming ? (
          <span class="muted" role="status">
            {' '}
            · writing…
          </span>
        ) : null}
      </header>
      <ToolList tools={calls} />
      {message.role === 'assistant' ? (
        // Sanitized by DOMPurify in renderMarkdown.
        <div class="markdown" dangerouslySetInnerHTML={{ __html: renderMarkdown(message.content) }} />
      ) : (
        <p class="user-text">{message.content}</p>
      )}
      {message.usage ? (
        <footer class="usage" data-testid="message-usage">
          {message.usage.input_tokens.toLocaleString()} tokens in ·{' '}
          {message.usage.output_tokens.toLocaleString()} out · {message.usage.credits} credits
        </footer>
      ) : null}
    </article>
  );
}

async function loadHistory(chatId: number, signal?: AbortSignal): Promise<Message[]> {
  const first = await get(`/api/v2/chats/${chatId}/messages`, { page_size: 100 }, signal);
  const pages = first.pagination.total_pages;
  if (pages <= 1) return first.messages;
  // The newest messages are on the last page (history is oldest first).
  const last = await get(`/api/v2/chats/${chatId}/messages`, { page_size: 100, page: pages }, signal);
  return last.messages;
}

/** History without the reply still being written (it is shown from the stream instead). */
function withoutInProgress(messages: Message[]): Message[] {
  const last = messages[messages.length - 1];
  return last?.role === 'assistant' ? messages.slice(0, -1) : messages;
}

export function ChatPlayground() {
  const refs = useRefs({
    projects: ['/api/v1/projects', 'projects'],
    agents: ['/api/v1/agents', 'agents'],
    models: ['/api/v1/model_configurations', 'model_configurations'],
  });
  const initialChat = Number(searchParam('chat')) || readPending()?.chatId || null;
  const [projectId, setProjectId] = useState('');
  const [agentId, setAgentId] = useState('');
  const [modelId, setModelId] = useState('');
  const [chatId, setChatId] = useState<number | null>(initialChat);
  const [chat, setChat] = useState<any>(null);
  const [messages, setMessages] = useState<Message[]>([]);
  const [historyLoading, setHistoryLoading] = useState(false);
  const [pending, setPending] = useState<Pending | null>(null);
  const [input, setInput] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [listTick, setListTick] = useState(0);
  const streamAbort = useRef<AbortController | null>(null);
  /** A chat just created by sending: its history is what this page already shows. */
  const skipLoad = useRef<number | null>(null);
  const log = useRef<HTMLDivElement>(null);

  const projects: any[] = refs.data?.projects ?? [];
  const agents: any[] = refs.data?.agents ?? [];
  const models: any[] = (refs.data?.models ?? []).filter((m: any) => m.purpose === 'chat');

  useEffect(() => {
    if (!projectId && projects.length > 0 && !chatId)
      setProjectId(String(projects.find((p) => !p.archived)?.id ?? ''));
  }, [projects.length]);

  const chats = useLoad(
    (signal) =>
      projectId
        ? get('/api/v2/chats', { project_id: projectId, page_size: 20 }, signal)
        : Promise.resolve({ chats: [] }),
    [projectId, listTick],
  );

  // Load a chat's history, and pick up a reply that was streaming when the page was reloaded.
  useEffect(() => {
    if (!chatId) {
      setChat(null);
      setMessages([]);
      return;
    }
    if (skipLoad.current === chatId) {
      skipLoad.current = null;
      return;
    }
    let cancelled = false;
    setHistoryLoading(true);
    setError(null);
    (async () => {
      try {
        const [{ chat: c }, history] = await Promise.all([
          get(`/api/v2/chats/${chatId}`),
          loadHistory(chatId),
        ]);
        if (cancelled) return;
        setChat(c);
        setProjectId(String(c.project_id));
        const resume = readPending();
        if (resume && resume.chatId === chatId) {
          setMessages(withoutInProgress(history));
          setHistoryLoading(false);
          await attach(chatId, resume);
        } else {
          setMessages(history);
          setHistoryLoading(false);
        }
      } catch (err) {
        if (cancelled || err instanceof StaleResponse) return;
        setError(err);
        setHistoryLoading(false);
        if (readPending()?.chatId === chatId) writePending(null);
      }
    })();
    return () => {
      cancelled = true;
    };
  }, [chatId]);

  useEffect(() => {
    log.current?.scrollTo({ top: log.current.scrollHeight });
  }, [messages.length, pending?.text.length, pending?.tools.length]);

  useEffect(() => () => streamAbort.current?.abort(), []);

  const handlerFor = (start: Pending) => {
    let current = start;
    setPending(current);
    writePending(current);
    return (event: SseEvent) => {
      const id = event.id ?? current.lastEventId;
      switch (event.event) {
        case 'content':
          current = { ...current, lastEventId: id, text: current.text + (event.data?.content ?? '') };
          break;
        case 'tool_start':
          current = {
            ...current,
            lastEventId: id,
            tools: [...current.tools, { ...event.data, status: 'running' }],
          };
          break;
        case 'tool_result':
          current = {
            ...current,
            lastEventId: id,
            tools: current.tools.map((t) =>
              t.tool_call_id === event.data?.tool_call_id
                ? { ...t, ...event.data, status: event.data?.error ? 'failed' : 'completed' }
                : t,
            ),
          };
          break;
        case 'done': {
          const message = event.data?.message as Message | undefined;
          if (message) setMessages((all) => [...all.filter((m) => m.id !== message.id), message]);
          writePending(null);
          setPending(null);
          return;
        }
        case 'error':
          writePending(null);
          setPending(null);
          setError(new ApiError(event.data?.code ?? 500, 'stream_error', streamErrorMessage(event.data)));
          return;
        default:
          return;
      }
      writePending(current);
      setPending(current);
    };
  };

  const settle = async (chat: number, request: Promise<boolean>, controller: AbortController) => {
    try {
      const streamed = await request;
      const left = readPending();
      if (left?.chatId === chat) {
        // The stream closed without done or error (a dropped connection, or nothing left to
        // attach to): history has whatever the service finished.
        writePending(null);
        setPending(null);
        setMessages(await loadHistory(chat));
        if (streamed)
          setError(new Error('The stream ended early; the history above is what the service kept.'));
      }
    } catch (err) {
      if (err instanceof StaleResponse || controller.signal.aborted) return;
      writePending(null);
      setPending(null);
      setError(err);
    } finally {
      if (streamAbort.current === controller) streamAbort.current = null;
      setListTick((t) => t + 1);
    }
  };

  async function attach(chat: number, resume: Pending) {
    const controller = new AbortController();
    streamAbort.current = controller;
    const onEvent = handlerFor(resume);
    await settle(
      chat,
      stream('GET', `/api/v2/chats/${chat}/stream`, {
        lastEventId: resume.lastEventId ?? undefined,
        signal: controller.signal,
        onEvent,
      }),
      controller,
    );
  }

  const send = async (e: Event) => {
    e.preventDefault();
    const content = input.trim();
    if (!content || pending) return;
    setError(null);
    let id = chatId;
    try {
      if (!id) {
        if (!projectId) throw new Error('Pick a project first.');
        const body: Record<string, number> = { project_id: Number(projectId) };
        if (agentId) body.agent_id = Number(agentId);
        if (modelId) body.model_configuration_id = Number(modelId);
        const created = await api('POST', '/api/v2/chats', { body });
        id = created.chat.id as number;
        setChat(created.chat);
        // The history effect must not reload over the message being sent.
        skipLoad.current = id;
        navigate(`/playground/chat?chat=${id}`, true);
        setChatId(id);
      }
    } catch (err) {
      if (!(err instanceof StaleResponse)) setError(err);
      return;
    }
    setInput('');
    const chatNow = id as number;
    setMessages((all) => [
      ...all,
      { id: `local-${Date.now()}`, role: 'user', content, model: null, tool_executions: [] },
    ]);
    const controller = new AbortController();
    streamAbort.current = controller;
    const onEvent = handlerFor({ chatId: chatNow, lastEventId: null, text: '', tools: [] });
    await settle(
      chatNow,
      stream('POST', `/api/v2/chats/${chatNow}/messages`, {
        body: { content, stream: true },
        signal: controller.signal,
        onEvent,
      }),
      controller,
    );
  };
  const cancel = async () => {
    if (!chatId) return;
    try {
      await api('POST', `/api/v2/chats/${chatId}/cancel`);
    } catch (err) {
      if (!(err instanceof StaleResponse)) setError(err);
    }
  };

  const newChat = () => {
    streamAbort.current?.abort();
    writePending(null);
    setPending(null);
    setChatId(null);
    setChat(null);
    setMessages([]);
    setError(null);
    navigate('/playground/chat', true);
  };

  const openChat = (id: number) => {
    if (pending) return;
    navigate(`/playground/chat?chat=${id}`, true);
    setChatId(id);
  };

  return (
    <section aria-labelledby="page-title" class="playground">
      <PageHeader title="Chat playground">
        <button type="button" class="secondary" onClick={newChat} disabled={Boolean(pending)}>
          New chat
        </button>
      </PageHeader>
      <div class="playground-grid">
        <aside class="card settings" aria-label="Chat settings">
          {refs.loading && !refs.data ? <Loading /> : null}
          <Field label="Project">
            {(id) => (
              <select
                id={id}
                value={projectId}
                disabled={Boolean(chatId)}
                onChange={(e) => setProjectId(e.currentTarget.value)}
              >
                <option value="">Choose a project…</option>
                {projects.map((p) => (
                  <option key={p.id} value={String(p.id)} disabled={p.archived}>
                    {p.name}
                    {p.archived ? ' (archived)' : ''}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Agent">
            {(id) => (
              <select
                id={id}
                value={chat ? String(chat.agent_id ?? '') : agentId}
                disabled={Boolean(chatId)}
                onChange={(e) => setAgentId(e.currentTarget.value)}
              >
                <option value="">No agent</option>
                {agents.map((a) => (
                  <option key={a.id} value={String(a.id)}>
                    {a.name}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Model" hint={models.length === 0 ? "The organization's default model" : undefined}>
            {(id) => (
              <select
                id={id}
                value={chat ? String(chat.model_configuration_id ?? '') : modelId}
                disabled={Boolean(chatId) || models.length === 0}
                onChange={(e) => setModelId(e.currentTarget.value)}
              >
                <option value="">Default model</option>
                {models.map((m) => (
                  <option key={m.id} value={String(m.id)}>
                    {m.name}
                    {m.is_default ? ' (default)' : ''}
                  </option>
                ))}
              </select>
            )}
          </Field>
          {chat ? (
            <p class="muted">
              Chat #{chat.id} in {nameOf(projects, chat.project_id)}: its project, agent and model are fixed.
              Start a new chat to change them.
            </p>
          ) : null}
          <h2>Chats of this key</h2>
          <States
            loaded={chats}
            empty="No chats in this project yet."
            isEmpty={(d: any) => d.chats.length === 0}
          >
            {(d: any) => (
              <ul class="plain chat-list">
                {d.chats.map((c: any) => (
                  <li key={c.id}>
                    <button
                      type="button"
                      class={c.id === chatId ? 'link current' : 'link'}
                      aria-current={c.id === chatId ? 'true' : undefined}
                      onClick={() => openChat(c.id)}
                    >
                      {c.title || `Chat ${c.id}`}
                    </button>
                  </li>
                ))}
              </ul>
            )}
          </States>
          {chatId && !pending ? (
            <ConfirmButton
              label="Archive chat"
              onConfirm={async () => {
                await api('DELETE', `/api/v2/chats/${chatId}`);
                newChat();
                setListTick((t) => t + 1);
              }}
            />
          ) : null}
        </aside>
        <div class="conversation">
          {/* biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region must be reachable by keyboard */}
          <div class="log" ref={log} aria-live="off" aria-label="Conversation" role="log" tabIndex={0}>
            {historyLoading ? <Loading label="Loading the history…" /> : null}
            {!historyLoading && messages.length === 0 && !pending ? (
              <p class="empty">
                Send a message to start. Try a skill's slash command, or ask about your documents.
              </p>
            ) : null}
            {messages.map((m) => (
              <MessageView key={m.id} message={m} />
            ))}
            {pending ? (
              <MessageView
                streaming
                message={{
                  id: 'streaming',
                  role: 'assistant',
                  content: pending.text,
                  model: null,
                  tool_executions: [],
                }}
                tools={pending.tools}
              />
            ) : null}
          </div>
          <ErrorMessage error={error ? new Error(describeError(error)) : null} />
          <form class="composer" onSubmit={send}>
            <label for="chat-input" class="sr-only">
              Message
            </label>
            <textarea
              id="chat-input"
              rows={3}
              placeholder="Write a message (Ctrl+Enter sends)"
              value={input}
              onInput={(e) => setInput(e.currentTarget.value)}
              onKeyDown={(e) => {
                if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
                  e.preventDefault();
                  (e.currentTarget.form as HTMLFormElement).requestSubmit();
                }
              }}
            />
            <div class="row">
              <button type="submit" disabled={Boolean(pending) || !input.trim() || (!chatId && !projectId)}>
                Send
              </button>
              {pending ? (
                <button type="button" class="danger" onClick={cancel}>
                  Cancel reply
                </button>
              ) : null}
            </div>
          </form>
        </div>
      </div>
    </section>
  );
}
