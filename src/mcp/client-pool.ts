import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { type CallToolResult, ErrorCode, McpError, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { checkOutboundUrl } from '../net/outbound.js';
import { describeMcpError, McpTimeoutError, McpUnavailableError } from './errors.js';
import { createGuardedFetch, type GuardedFetch } from './guarded-fetch.js';

/** What the pool needs to reach one tool server. */
export interface McpServerConfig {
  /** The integration id: one connection per integration. */
  id: number;
  /** Changes whenever the integration does (its updated_at), so an edit reconnects. */
  version: string;
  url: string;
  headers: Record<string, string>;
}

export interface McpPoolOptions {
  /** OUTBOUND_ALLOW_PRIVATE: http:// and private addresses allowed. */
  allowPrivate: boolean;
  /** Connecting and the initialize handshake, per transport tried. */
  connectTimeoutMs: number;
  /** One tool call, from request to result. */
  callTimeoutMs: number;
  /** Listing tools (each page). */
  listTimeoutMs: number;
  /** How long a tool list is reused; a `tools/list_changed` notification drops it sooner. */
  toolsTtlMs: number;
  /**
   * After a failed connection, turns skip the server for this long instead of each waiting for
   * the connect timeout again; `recheck` (the tools endpoint) always tries.
   */
  retryDownAfterMs: number;
}

export const DEFAULT_MCP_POOL_OPTIONS: Omit<McpPoolOptions, 'allowPrivate'> = {
  connectTimeoutMs: 10_000,
  callTimeoutMs: 60_000,
  listTimeoutMs: 10_000,
  toolsTtlMs: 60_000,
  retryDownAfterMs: 15_000,
};

export type McpTransportKind = 'streamable-http' | 'sse';

export interface McpTool {
  name: string;
  description: string;
  inputSchema: Tool['inputSchema'];
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Connect even if the server failed moments ago. */
  recheck?: boolean;
}

interface Connection {
  config: McpServerConfig;
  client: Client;
  transport: McpTransportKind;
  tools: { list: McpTool[]; fetchedAt: number } | null;
  loadingTools: Promise<McpTool[]> | null;
  closed: boolean;
}

interface Entry {
  version: string;
  connection: Promise<Connection>;
}

const CLIENT_INFO = { name: 'scriptorium', version: '1.0.0' };

/**
 * The MCP SDK's client and transports, loaded on the first connection: a process whose projects
 * use no tool server never holds them (about 4 MB of resident memory; bench/README.md, Session 9).
 */
async function loadMcpClient() {
  const [{ Client }, { SSEClientTransport }, { StreamableHTTPClientTransport, StreamableHTTPError }] =
    await Promise.all([
      import('@modelcontextprotocol/sdk/client/index.js'),
      import('@modelcontextprotocol/sdk/client/sse.js'),
      import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    ]);
  return { Client, SSEClientTransport, StreamableHTTPClientTransport, StreamableHTTPError };
}
type McpClientModules = Awaited<ReturnType<typeof loadMcpClient>>;
let loading: Promise<McpClientModules> | null = null;
/** Set once loaded: a connection's errors can only come after. */
let loaded: McpClientModules | null = null;
const mcpClient = () => {
  loading ??= loadMcpClient().then((modules) => {
    loaded = modules;
    return modules;
  });
  return loading;
};
const isStreamableHttpError = (error: unknown): error is { code?: number } =>
  loaded !== null && error instanceof loaded.StreamableHTTPError;
const MAX_TOOL_PAGES = 20;

/**
 * Long-lived MCP client connections, one per integration, shared by every chat turn and
 * generation of the process. Streamable HTTP first; a 4xx answer to it (an older server) falls
 * back to the HTTP+SSE transport. Each connection keeps its tool list for `toolsTtlMs`.
 */
export class McpPool {
  private options: McpPoolOptions;
  private guarded: GuardedFetch;
  private readonly entries = new Map<number, Entry>();
  private readonly failures = new Map<number, { version: string; until: number; error: Error }>();

  constructor(options: McpPoolOptions) {
    this.options = options;
    this.guarded = createGuardedFetch(options.allowPrivate, options.connectTimeoutMs);
  }

  /** Changes timeouts or TTLs (tests, operators); open connections are dropped so new ones use them. */
  async configure(overrides: Partial<McpPoolOptions>): Promise<void> {
    await this.closeConnections();
    this.failures.clear();
    await this.guarded.close();
    this.options = { ...this.options, ...overrides };
    this.guarded = createGuardedFetch(this.options.allowPrivate, this.options.connectTimeoutMs);
  }

  get settings(): Readonly<McpPoolOptions> {
    return this.options;
  }

  /** The server's tools, from the cache while it is fresh. */
  async listTools(config: McpServerConfig, options: CallOptions = {}): Promise<McpTool[]> {
    return this.withConnection(config, options, async (connection) => {
      const cached = connection.tools;
      if (cached && Date.now() - cached.fetchedAt < this.options.toolsTtlMs) return cached.list;
      return this.loadTools(connection, options.signal);
    });
  }

  /** Calls a tool; resolves with the server's result, `isError` included, or rejects (timeout, protocol). */
  async callTool(
    config: McpServerConfig,
    name: string,
    args: Record<string, unknown>,
    options: CallOptions = {},
  ): Promise<CallToolResult> {
    return this.withConnection(config, options, async (connection) => {
      const result = await connection.client.callTool({ name, arguments: args }, undefined, {
        timeout: this.options.callTimeoutMs,
        signal: options.signal,
      });
      return result as CallToolResult;
    });
  }

  /** Which transport the open connection uses (null when not connected). */
  async transportOf(id: number): Promise<McpTransportKind | null> {
    const entry = this.entries.get(id);
    if (!entry) return null;
    return entry.connection.then(
      (c) => (c.closed ? null : c.transport),
      () => null,
    );
  }

  /** Closes the integration's connection (after an edit or a delete). */
  async forget(id: number): Promise<void> {
    this.failures.delete(id);
    const entry = this.entries.get(id);
    if (!entry) return;
    this.entries.delete(id);
    await entry.connection.then((c) => this.closeConnection(c)).catch(() => {});
  }

  async close(): Promise<void> {
    await this.closeConnections();
    await this.guarded.close();
  }

  private async closeConnections(): Promise<void> {
    const ids = [...this.entries.keys()];
    await Promise.all(ids.map((id) => this.forget(id)));
  }

  /**
   * Runs `work` on the integration's connection. A connection the server no longer knows (its
   * session expired: 404, spec "Session Management") is replaced once; the request was not processed.
   */
  private async withConnection<T>(
    config: McpServerConfig,
    options: CallOptions,
    work: (c: Connection) => Promise<T>,
  ): Promise<T> {
    const connection = await this.connectionFor(config, options.recheck ?? false);
    try {
      return await work(connection);
    } catch (error) {
      if (isTransportFailure(error)) await this.drop(connection);
      if (!(isStreamableHttpError(error) && error.code === 404)) throw error;
      return work(await this.connectionFor(config, true));
    }
  }

  private connectionFor(config: McpServerConfig, recheck: boolean): Promise<Connection> {
    const existing = this.entries.get(config.id);
    if (existing && existing.version === config.version) return existing.connection;
    if (existing) void this.forget(config.id);
    const failure = this.failures.get(config.id);
    if (!recheck && failure && failure.version === config.version && Date.now() < failure.until) {
      return Promise.reject(failure.error);
    }
    const connection = this.connect(config);
    const entry: Entry = { version: config.version, connection };
    this.entries.set(config.id, entry);
    connection.then(
      () => this.failures.delete(config.id),
      (error: Error) => {
        // A failed connection is not kept; it is remembered briefly so turns do not each wait for it.
        if (this.entries.get(config.id) === entry) this.entries.delete(config.id);
        const until = Date.now() + this.options.retryDownAfterMs;
        this.failures.set(config.id, { version: config.version, until, error });
      },
    );
    return connection;
  }

  private async drop(connection: Connection): Promise<void> {
    const entry = this.entries.get(connection.config.id);
    if (entry) {
      const current = await entry.connection.catch(() => null);
      if (current === connection) this.entries.delete(connection.config.id);
    }
    await this.closeConnection(connection);
  }

  private async closeConnection(connection: Connection): Promise<void> {
    if (connection.closed) return;
    connection.closed = true;
    await connection.client.close().catch(() => {});
  }

  private async connect(config: McpServerConfig): Promise<Connection> {
    let url: URL;
    try {
      // Checked again here: OUTBOUND_ALLOW_PRIVATE may have changed since the URL was saved.
      url = checkOutboundUrl(config.url, this.options.allowPrivate);
    } catch (error) {
      throw new McpUnavailableError(describeMcpError(error, secretsOf(config)));
    }
    const transportOptions = { fetch: this.guarded.fetch, requestInit: { headers: config.headers } };
    const { SSEClientTransport, StreamableHTTPClientTransport } = await mcpClient();
    try {
      return await this.handshake(
        config,
        'streamable-http',
        new StreamableHTTPClientTransport(url, transportOptions),
      );
    } catch (error) {
      // 4xx to the initialize POST: a server of the older HTTP+SSE transport (spec "Backwards Compatibility").
      const older = isStreamableHttpError(error) && (error.code ?? 0) >= 400 && (error.code ?? 0) < 500;
      if (!older) throw new McpUnavailableError(describeMcpError(error, secretsOf(config)));
      try {
        return await this.handshake(config, 'sse', new SSEClientTransport(url, transportOptions));
      } catch (sseError) {
        const secrets = secretsOf(config);
        throw new McpUnavailableError(
          `${describeMcpError(error, secrets)}; with HTTP+SSE: ${describeMcpError(sseError, secrets)}`,
        );
      }
    }
  }

  private async handshake(
    config: McpServerConfig,
    kind: McpTransportKind,
    transport: Transport,
  ): Promise<Connection> {
    let connection: Connection | null = null;
    const { Client } = await mcpClient();
    const client = new Client(CLIENT_INFO, {
      listChanged: {
        tools: {
          autoRefresh: false,
          debounceMs: 50,
          onChanged: () => {
            if (!connection || connection.closed) return;
            connection.tools = null;
            void this.loadTools(connection).catch(() => {});
          },
        },
      },
    });
    const timeoutMs = this.options.connectTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new McpTimeoutError(`no answer within ${timeoutMs} ms while connecting`)),
        timeoutMs,
      );
    });
    try {
      // The race also covers the SSE transport's wait for its endpoint event, which has no timeout of its own.
      await Promise.race([client.connect(transport, { timeout: timeoutMs }), timeout]);
    } catch (error) {
      await client.close().catch(() => {});
      throw error;
    } finally {
      clearTimeout(timer);
    }
    const opened: Connection = {
      config,
      client,
      transport: kind,
      tools: null,
      loadingTools: null,
      closed: false,
    };
    connection = opened;
    client.onclose = () => {
      opened.closed = true;
      const entry = this.entries.get(config.id);
      if (entry) void entry.connection.then((c) => c === opened && this.entries.delete(config.id));
    };
    return opened;
  }

  /** One listing at a time per connection; concurrent turns share it. */
  private loadTools(connection: Connection, signal?: AbortSignal): Promise<McpTool[]> {
    if (connection.loadingTools) return connection.loadingTools;
    const loading = (async () => {
      const list: McpTool[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < MAX_TOOL_PAGES; page++) {
        const result = await connection.client.listTools(cursor ? { cursor } : undefined, {
          timeout: this.options.listTimeoutMs,
          signal,
        });
        for (const tool of result.tools) {
          list.push({ name: tool.name, description: tool.description ?? '', inputSchema: tool.inputSchema });
        }
        cursor = result.nextCursor;
        if (!cursor) break;
      }
      connection.tools = { list, fetchedAt: Date.now() };
      return list;
    })();
    connection.loadingTools = loading;
    const clear = () => {
      if (connection.loadingTools === loading) connection.loadingTools = null;
    };
    loading.then(clear, clear);
    return loading;
  }
}

/** The header values of a server, to keep out of error messages. */
export const secretsOf = (config: McpServerConfig) => Object.values(config.headers);

/** Errors that say the connection itself is broken (not a tool's or the protocol's answer). */
function isTransportFailure(error: unknown): boolean {
  if (isStreamableHttpError(error)) return true;
  if (error instanceof McpError) return error.code === ErrorCode.ConnectionClosed;
  const e = error as { name?: string; message?: string } | null;
  return e?.name === 'TypeError' || e?.message === 'Not connected';
}
