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
  llm: { provider: LlmProvider; baseUrl: string | null; apiKey: string | null; model: string } | null;
  secretKey: string | null;
  webhookRetryBaseMs: number;
  uploadMaxBytes: number;
  shutdownGraceMs: number;
  /** A chat turn's lease: how soon a turn of a process that died stops blocking its chat. */
  turnLeaseMs: number;
  /** A model silent this long fails the turn. */
  modelIdleTimeoutMs: number;
  logLevel: string;
  /** Browser origins allowed to call the API (CORS); empty: CORS is off. */
  corsOrigins: string[];
}

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
    llm: llmSettings(env),
    secretKey,
    webhookRetryBaseMs: integer(env, 'WEBHOOK_RETRY_BASE_MS', 10_000, 1),
    uploadMaxBytes: integer(env, 'UPLOAD_MAX_BYTES', 50 * 1024 * 1024, 1),
    shutdownGraceMs: integer(env, 'SHUTDOWN_GRACE_MS', 25_000, 0),
    turnLeaseMs: integer(env, 'TURN_LEASE_MS', 60_000, 1000),
    modelIdleTimeoutMs: integer(env, 'MODEL_IDLE_TIMEOUT_MS', 120_000, 1000),
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
