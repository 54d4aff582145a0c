import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { NOT_BLANK } from './schemas.js';

export type Details = Record<string, string[]>;

/**
 * The one error type services throw. `code` is a stable snake_case identifier; each API family
 * renders it in its own body (see `sendError`).
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: Details = {},
    /** Extra fields for the v2 envelope, e.g. `chat_id` of a chat created before its reply failed. */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export const badRequest = (message: string, details: Details = {}, code = 'invalid_request') =>
  new ApiError(400, code, message, details);
export const unauthorized = (message = 'Missing or invalid API key', code = 'unauthorized') =>
  new ApiError(401, code, message);
export const paymentRequired = (message = 'The organization has no credits left') =>
  new ApiError(402, 'insufficient_credits', message);
export const forbidden = (message = 'This key may not perform this action', code = 'forbidden') =>
  new ApiError(403, code, message);
export const notFound = (what: string, code = `${what.toLowerCase().replace(/\s+/g, '_')}_not_found`) =>
  new ApiError(404, code, `${what} not found`);
export const conflict = (message: string, code = 'conflict') => new ApiError(409, code, message);
export const unprocessable = (message: string, details: Details = {}, code = 'validation_failed') =>
  new ApiError(422, code, message, details);

export type Family = 'v1' | 'v2' | 'plain';

export function familyOf(url: string): Family {
  if (url.startsWith('/api/v2')) return 'v2';
  if (url.startsWith('/api/')) return 'v1';
  return 'plain';
}

export function errorBody(family: Family, error: ApiError): unknown {
  if (family === 'v2') {
    return {
      status: 'error',
      response: { code: error.status, error: error.code, message: error.message, ...error.extra },
    };
  }
  return { error: { message: error.message, code: error.code, details: error.details } };
}

// Keywords that mean "well-formed but breaks a rule" (422 in v1) rather than "malformed" (400).
const RULE_KEYWORDS = new Set([
  'required',
  'minLength',
  'maxLength',
  'minItems',
  'maxItems',
  'uniqueItems',
  'pattern',
  'enum',
  'format',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
]);

interface ValidationIssue {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, any>;
}

function fieldOf(issue: ValidationIssue): string {
  const path = issue.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (issue.keyword === 'required')
    return path ? `${path}.${issue.params.missingProperty}` : issue.params.missingProperty;
  return path || 'body';
}

function fromValidation(family: Family, error: FastifyError): ApiError {
  const issues = (error.validation ?? []) as ValidationIssue[];
  const part = (error as any).validationContext as string | undefined;
  const details: Details = {};
  for (const issue of issues) {
    const field = fieldOf(issue);
    const message =
      issue.keyword === 'required'
        ? 'is required'
        : issue.keyword === 'pattern' && issue.params.pattern === NOT_BLANK
          ? 'must not be blank'
          : issue.keyword === 'enum'
            ? `must be one of: ${issue.params.allowedValues.join(', ')}`
            : (issue.message ?? 'is invalid');
    details[field] = [...(details[field] ?? []), message];
  }
  const summary = Object.entries(details)
    .map(([field, messages]) => `${field} ${messages.join(', ')}`)
    .join('; ');
  const isRule = part === 'body' && issues.length > 0 && issues.every((i) => RULE_KEYWORDS.has(i.keyword));
  if (family === 'v1' && isRule) return unprocessable(`Validation failed: ${summary}`, details);
  const where = part === 'querystring' ? 'query parameter' : part === 'params' ? 'path parameter' : 'field';
  return badRequest(`Invalid ${where}: ${summary}`, details);
}

/** The SQLSTATE of a database error, looking through the wrappers (Drizzle puts the driver's in `cause`). */
function sqlState(error: unknown): string | undefined {
  for (let e = error as any, depth = 0; e && depth < 5; e = e.cause, depth++) {
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return e.code;
  }
  return undefined;
}

function fromDatabase(state: string | undefined): ApiError | null {
  switch (state) {
    case '23505':
      return conflict('A resource with these values already exists', 'already_exists');
    case '23503':
      return unprocessable('A referenced resource does not exist', {}, 'invalid_reference');
    case '22P02':
    case '22003':
    case '22001':
    case '22021':
    case '22P05':
      return badRequest('A parameter is out of range or malformed');
    default:
      return null;
  }
}

/** Turns anything thrown into an ApiError; unexpected errors become a 500 without internals. */
export function toApiError(family: Family, error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  const fromDb = fromDatabase(sqlState(error));
  if (fromDb) return fromDb;
  const e = error as FastifyError;
  if (e?.validation) return fromValidation(family, e);
  switch (e?.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return badRequest('The request body is not valid JSON', {}, 'malformed_json');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
    case 'FST_REQ_FILE_TOO_LARGE':
      return new ApiError(413, 'payload_too_large', 'The request body is too large');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError(415, 'unsupported_media_type', 'Unsupported content type');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return badRequest('Invalid Content-Length');
  }
  if (e?.name === 'SyntaxError' && e.statusCode === 400) {
    return badRequest('The request body is not valid JSON', {}, 'malformed_json');
  }
  if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new ApiError(e.statusCode, 'invalid_request', e.message);
  }
  return new ApiError(500, 'internal_error', 'Internal server error');
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: unknown) {
  const family = familyOf(request.url);
  const apiError = toApiError(family, error);
  if (apiError.status >= 500) request.log.error({ err: error }, 'request failed');
  return reply.status(apiError.status).send(errorBody(family, apiError));
}

/**
 * Node's HTTP parser refused the request (a malformed request line or header, headers too large, a
 * request too slow to arrive): answered in the family's error body like every other refusal, not
 * Fastify's own. The family comes from the request line, as far as it was read.
 */
export function clientErrorHandler(
  this: { log: { trace: (obj: object, msg: string) => void } },
  err: Error & { code?: string; rawPacket?: unknown },
  socket: Socket,
): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const error =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? new ApiError(408, 'request_timeout', 'The request did not arrive in time')
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? new ApiError(431, 'headers_too_large', 'The request headers are too large')
        : new ApiError(400, 'invalid_request', 'The HTTP request is malformed');
  this.log.trace({ err }, 'client error');
  if (socket.writable) {
    const line = Buffer.isBuffer(err.rawPacket) ? err.rawPacket.toString('latin1', 0, 256) : '';
    const target = /^[A-Z]+ (\S+)/.exec(line)?.[1] ?? '';
    const body = JSON.stringify(errorBody(familyOf(target), error));
    socket.write(
      `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}
