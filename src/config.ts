import path from 'node:path';
import { ENVIRONMENT_PROVIDERS, type EnvironmentProvider, PROVIDERS } from './llm/providers.js';

export type LlmProvider = EnvironmentProvider;

export interface Config {
  port: number;
  host: string;
  databaseUrl: string | null;
  dataDir: string;
  redisUrl: string | null;
  publicBaseUrl: string;
  replyTimeoutMs: number;
  rateLimitPerMinute: number;
  defaultOrgCredits: number;
  outboundAllowPrivate: boolean;
  /**
   * `host:port` patterns a model configuration's base URL may use although private (a local model
   * server): MODEL_BASE_URL_ALLOW, plus the host of LLM_BASE_URL, which the operator chose.
   */
  modelBaseUrlAllow: string[];
  llm: { provider: LlmProvider; baseUrl: string | null; apiKey: string | null; model: string } | null;
  secretKey: string | null;
  webhookRetryBaseMs: number;
  uploadMaxBytes: number;
  shutdownGraceMs: number;
  /** A chat turn's lease: how soon a turn of a process that died stops blocking its chat. */
  turnLeaseMs: number;
  /** A model silent this long fails the turn. */
  modelIdleTimeoutMs: number;
  /** Whether a chat's next model request may be sent before its turn's statement answers. */
  earlyModelRequests: boolean;
  /** How long a tool call needing approval waits for a decision before it counts as denied. */
  approvalTimeoutMs: number;
  /** Hard bounds on extracting one uploaded document (see DOCUMENT_LIMIT_DEFAULTS). */
  documentLimits: DocumentLimits;
  logLevel: string;
  /** Browser origins allowed to call the API (CORS); empty: CORS is off. */
  corsOrigins: string[];
}

/**
 * What one document's text extraction may use. A document past any bound fails at once with a
 * reason; extraction runs in a child process, so a bound that is missed costs that process only.
 */
export interface DocumentLimits {
  /** Bytes the parsed parts may inflate to: a DOCX's XML parts, a PDF's non-image streams. */
  maxDecompressedBytes: number;
  /** XML or HTML elements (start tags) of a DOCX or HTML file. */
  maxElements: number;
  maxPages: number;
  /** Characters of extracted text. */
  maxChars: number;
  /** Wall time of one extraction. */
  timeoutMs: number;
  /** The extractor's V8 heap; its resident memory may reach twice this before it is killed. */
  memoryMb: number;
}

export const DOCUMENT_LIMIT_DEFAULTS: DocumentLimits = {
  maxDecompressedBytes: 64 * 1024 * 1024,
  // mammoth holds about 1 KB of heap per XML element: 500,000 fit in the default heap.
  maxElements: 500_000,
  maxPages: 2_000,
  maxChars: 10_000_000,
  timeoutMs: 60_000,
  memoryMb: 1024,
};

/** A bad environment value stops start-up with one line naming the variable. */
export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

function read(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function integer(env: Env, name: string, fallback: number, min = 0): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min) {
    throw new ConfigError(`${name} must be an integer >= ${min}, got "${raw}"`);
  }
  return Number(raw);
}

function number(env: Env, name: string, fallback: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0)
    throw new ConfigError(`${name} must be a number >= 0, got "${raw}"`);
  return value;
}

function boolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const raw = read(env, name);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be a URL, got "${raw}"`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must use ${protocols.join(' or ')}, got "${parsed.protocol}"`);
  }
  return raw;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const LLM_PROVIDERS: readonly LlmProvider[] = ENVIRONMENT_PROVIDERS;

// host (name, IPv4, [IPv6] or *.domain) ':' port or '*'
const HOST_PORT = /^(\*\.)?([a-z0-9-]+(\.[a-z0-9-]+)*|\[[0-9a-f:.]+\]):(\d{1,5}|\*)$/;

function modelBaseUrlAllow(env: Env, llm: Config['llm']): string[] {
  const patterns = (read(env, 'MODEL_BASE_URL_ALLOW') ?? '')
    .split(',')
    .map((entry) => entry.trim().toLowerCase())
    .filter(Boolean);
  for (const pattern of patterns) {
    if (!HOST_PORT.test(pattern)) {
      throw new ConfigError(
        `MODEL_BASE_URL_ALLOW must be comma-separated host:port patterns (e.g. 127.0.0.1:11434, *.internal:*), got "${pattern}"`,
      );
    }
  }
  if (llm?.baseUrl) {
    const url = new URL(llm.baseUrl);
    patterns.push(`${url.hostname.toLowerCase()}:${url.port || (url.protocol === 'https:' ? '443' : '80')}`);
  }
  return patterns;
}

function documentLimits(env: Env): DocumentLimits {
  const d = DOCUMENT_LIMIT_DEFAULTS;
  const mb = 1024 * 1024;
  return {
    maxDecompressedBytes: integer(env, 'DOCUMENT_MAX_DECOMPRESSED_MB', d.maxDecompressedBytes / mb, 1) * mb,
    maxElements: integer(env, 'DOCUMENT_MAX_ELEMENTS', d.maxElements, 1),
    maxPages: integer(env, 'DOCUMENT_MAX_PAGES', d.maxPages, 1),
    maxChars: integer(env, 'DOCUMENT_MAX_CHARS', d.maxChars, 1),
    timeoutMs: integer(env, 'DOCUMENT_EXTRACT_TIMEOUT_MS', d.timeoutMs, 100),
    memoryMb: integer(env, 'DOCUMENT_EXTRACT_MEMORY_MB', d.memoryMb, 64),
  };
}

function llmSettings(env: Env): Config['llm'] {
  const provider = read(env, 'LLM_PROVIDER');
  if (provider === undefined || provider === 'builtin') return null;
  if (!LLM_PROVIDERS.includes(provider as LlmProvider)) {
    throw new ConfigError(
      `LLM_PROVIDER must be one of ${LLM_PROVIDERS.join(', ')}, builtin, got "${provider}"`,
    );
  }
  const model = read(env, 'LLM_MODEL');
  if (model === undefined) throw new ConfigError('LLM_MODEL is required when LLM_PROVIDER is set');
  const baseUrl = url(env, 'LLM_BASE_URL', ['http:', 'https:']) ?? null;
  if (PROVIDERS[provider as LlmProvider].needsBaseUrl && baseUrl === null) {
    throw new ConfigError(`LLM_BASE_URL is required when LLM_PROVIDER is ${provider}`);
  }
  return { provider: provider as LlmProvider, baseUrl, apiKey: read(env, 'LLM_API_KEY') ?? null, model };
}

export function loadConfig(env: Env = process.env): Config {
  const port = integer(env, 'PORT', 3000);
  if (port > 65535) throw new ConfigError(`PORT must be at most 65535, got "${port}"`);
  const host = read(env, 'HOST') ?? '127.0.0.1';
  const logLevel = read(env, 'LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }
  const secretKey = read(env, 'SECRET_KEY') ?? null;
  if (secretKey !== null && secretKey.length < 16) {
    throw new ConfigError('SECRET_KEY must be at least 16 characters');
  }
  const llm = llmSettings(env);
  const publicBaseUrl = url(env, 'PUBLIC_BASE_URL', ['http:', 'https:']) ?? `http://${host}:${port}`;
  return {
    port,
    host,
    databaseUrl: url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']) ?? null,
    dataDir: path.resolve(read(env, 'DATA_DIR') ?? './data'),
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']) ?? null,
    publicBaseUrl: publicBaseUrl.replace(/\/+$/, ''),
    replyTimeoutMs: integer(env, 'REPLY_TIMEOUT_MS', 300_000, 1),
    rateLimitPerMinute: integer(env, 'RATE_LIMIT_PER_MINUTE', 600, 1),
    defaultOrgCredits: number(env, 'DEFAULT_ORG_CREDITS', 1000),
    outboundAllowPrivate: boolean(env, 'OUTBOUND_ALLOW_PRIVATE', false),
    modelBaseUrlAllow: modelBaseUrlAllow(env, llm),
    llm,
    secretKey,
    webhookRetryBaseMs: integer(env, 'WEBHOOK_RETRY_BASE_MS', 10_000, 1),
    uploadMaxBytes: integer(env, 'UPLOAD_MAX_BYTES', 50 * 1024 * 1024, 1),
    shutdownGraceMs: integer(env, 'SHUTDOWN_GRACE_MS', 25_000, 0),
    turnLeaseMs: integer(env, 'TURN_LEASE_MS', 60_000, 1000),
    modelIdleTimeoutMs: integer(env, 'MODEL_IDLE_TIMEOUT_MS', 120_000, 1000),
    earlyModelRequests: boolean(env, 'EARLY_MODEL_REQUESTS', true),
    approvalTimeoutMs: integer(env, 'APPROVAL_TIMEOUT_MS', 600_000, 1),
    documentLimits: documentLimits(env),
    logLevel,
    corsOrigins: corsOrigins(env),
  };
}

/** `CORS_ORIGINS`: comma-separated origins (`https://app.example.com`), each exactly an origin. */
function corsOrigins(env: Env): string[] {
  const value = read(env, 'CORS_ORIGINS');
  if (!value) return [];
  return value
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean)
    .map((item) => {
      let origin: string | null = null;
      try {
        const parsed = new URL(item);
        if (parsed.protocol === 'http:' || parsed.protocol === 'https:') origin = parsed.origin;
      } catch {
        // reported below
      }
      if (origin === null || origin !== item.replace(/\/$/, '')) {
        throw new ConfigError(
          `CORS_ORIGINS must be comma-separated origins like https://app.example.com, got "${item}"`,
        );
      }
      return origin;
    });
}
