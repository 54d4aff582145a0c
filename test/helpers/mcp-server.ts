/**
 * A real MCP tool server on 127.0.0.1, built with the official SDK (`McpServer`), speaking
 * Streamable HTTP (stateful sessions, so `tools/list_changed` notifications reach the client)
 * or, for fallback tests, only the older HTTP+SSE transport.
 *
 * Tools: `echo` (text + structured result), `add`, `fail` (an `isError` result), `explode`
 * (throws), `hang` (answers only when cancelled or closed).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

export interface McpRequestRecord {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  /** JSON-RPC methods in a POST body. */
  rpc: string[];
}

export interface TestMcpServer {
  /** The endpoint to configure: `/mcp` (Streamable HTTP) or `/sse` (HTTP+SSE). */
  url: string;
  requests: McpRequestRecord[];
  /** Tool calls received, by tool name, with their arguments. */
  calls: { name: string; args: unknown }[];
  /** `tools/list` requests received. */
  listCount(): number;
  /** Adds a tool to every open session (the SDK then sends `notifications/tools/list_changed`). */
  addTool(name: string, description: string): void;
  /** Calls of `hang` that ended because the client cancelled them. */
  cancelledHangs(): number;
  /** Forgets every session, as a restarted server would: later requests with an old session id get 404. */
  dropSessions(): Promise<void>;
  close(): Promise<void>;
}

export interface McpServerOptions {
  transport?: 'streamable-http' | 'sse';
  /** When set, requests without exactly this Authorization header get 401. */
  requireAuthorization?: string;
  /** Server name reported at initialize. */
  name?: string;
}

interface State {
  calls: { name: string; args: unknown }[];
  cancelled: number;
  extraTools: { name: string; description: string }[];
  servers: Set<McpServer>;
}

function buildServer(state: State, name: string): McpServer {
  const server = new McpServer({ name, version: '1.0.0' });
  const record = (tool: string, args: unknown) => state.calls.push({ name: tool, args });

  server.registerTool(
    'echo',
    {
      description: 'Echoes the text back',
      inputSchema: { text: z.string().describe('What to echo') },
      outputSchema: { echoed: z.string(), length: z.number() },
    },
    async ({ text }) => {
      record('echo', { text });
      return {
        content: [{ type: 'text', text: `Echo: ${text}` }],
        structuredContent: { echoed: text, length: text.length },
      };
    },
  );
  server.registerTool(
    'add',
    { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } },
    async ({ a, b }) => {
      record('add', { a, b });
      return { content: [{ type: 'text', text: String(a + b) }] };
    },
  );
  server.registerTool('fail', { description: 'Always reports a failure' }, async () => {
    record('fail', {});
    return { isError: true, content: [{ type: 'text', text: 'The widget is broken' }] };
  });
  server.registerTool('explode', { description: 'Throws while running' }, async () => {
    record('explode', {});
    throw new Error('kaboom');
  });
  server.registerTool('hang', { description: 'Never answers' }, async (extra) => {
    record('hang', {});
    await new Promise<void>((resolve) => {
      if (extra.signal.aborted) resolve();
      extra.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    state.cancelled++;
    return { content: [{ type: 'text', text: 'cancelled' }] };
  });
  for (const extra of state.extraTools) registerExtra(server, state, extra.name, extra.description);

  return server;
}

function registerExtra(server: McpServer, state: State, name: string, description: string) {
  server.registerTool(name, { description, inputSchema: { value: z.string() } }, async ({ value }) => {
    state.calls.push({ name, args: { value } });
    return { content: [{ type: 'text', text: `${name}: ${value}` }] };
  });
}

export async function startMcpServer(options: McpServerOptions = {}): Promise<TestMcpServer> {
  const kind = options.transport ?? 'streamable-http';
  const name = options.name ?? 'test-tools';
  const state: State = { calls: [], cancelled: 0, extraTools: [], servers: new Set() };
  const requests: McpRequestRecord[] = [];
  const streamable = new Map<string, StreamableHTTPServerTransport>();
  const sse = new Map<string, SSEServerTransport>();

  const connectServer = async (transport: StreamableHTTPServerTransport | SSEServerTransport) => {
    const server = buildServer(state, name);
    state.servers.add(server);
    const onclose = transport.onclose;
    transport.onclose = () => {
      state.servers.delete(server);
      onclose?.();
    };
    await server.connect(transport);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    const body = req.method === 'POST' ? parseJson(await readBody(req)) : undefined;
    const messages = Array.isArray(body) ? body : body ? [body] : [];
    const rpc = messages.map((m) => (m as { method?: string })?.method).filter((m) => typeof m === 'string');
    requests.push({ method: req.method ?? 'GET', path, headers: { ...req.headers }, rpc });
    if (options.requireAuthorization && req.headers.authorization !== options.requireAuthorization) {
      // Like some real servers, it echoes what it got: the client must not pass that on.
      return send(res, 401, { error: 'unauthorized', received: req.headers.authorization ?? null });
    }
    if (kind === 'streamable-http') {
      if (path !== '/mcp') return send(res, 404, { error: 'not found' });
      const sessionId = req.headers['mcp-session-id'];
      const existing = typeof sessionId === 'string' ? streamable.get(sessionId) : undefined;
      if (existing) return existing.handleRequest(req, res, body);
      if (sessionId) return send(res, 404, jsonRpcError('Session not found'));
      if (req.method !== 'POST') return send(res, 400, jsonRpcError('No session'));
      if (!isInitializeRequest(body)) return send(res, 400, jsonRpcError('Expected initialize'));
      const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
          streamable.set(id, transport);
        },
      });
      transport.onclose = () => {
        if (transport.sessionId) streamable.delete(transport.sessionId);
      };
      await connectServer(transport);
      return transport.handleRequest(req, res, body);
    }
    // The older HTTP+SSE transport: GET /sse opens the stream, POST /messages?sessionId= carries requests.
    if (path === '/sse' && req.method === 'GET') {
      const transport = new SSEServerTransport('/messages', res);
      sse.set(transport.sessionId, transport);
      transport.onclose = () => sse.delete(transport.sessionId);
      await connectServer(transport);
      return;
    }
    if (path === '/messages' && req.method === 'POST') {
      const id = new URL(req.url ?? '/', 'http://x').searchParams.get('sessionId') ?? '';
      const transport = sse.get(id);
      if (!transport) return send(res, 404, { error: 'unknown session' });
      return transport.handlePostMessage(req, res, body);
    }
    return send(res, path === '/sse' ? 405 : 404, { error: 'not supported' });
  };

  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, { error: String(error) });
      else res.destroy();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}${kind === 'streamable-http' ? '/mcp' : '/sse'}`,
    requests,
    calls: state.calls,
    listCount: () => requests.filter((r) => r.rpc.includes('tools/list')).length,
    cancelledHangs: () => state.cancelled,
    addTool(toolName, description) {
      state.extraTools.push({ name: toolName, description });
      for (const s of state.servers) registerExtra(s, state, toolName, description);
    },
    async dropSessions() {
      for (const s of [...state.servers]) await s.close().catch(() => {});
    },
    async close() {
      for (const s of [...state.servers]) await s.close().catch(() => {});
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
      await closed;
    },
  };
}

/** A loopback URL where nothing listens: a tool server that is down. */
export async function unusedLoopbackUrl(): Promise<string> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return `http://127.0.0.1:${port}/mcp`;
}

function jsonRpcError(message: string) {
  return { jsonrpc: '2.0', error: { code: -32000, message }, id: null };
}

function send(res: ServerResponse, status: number, body: unknown) {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}
