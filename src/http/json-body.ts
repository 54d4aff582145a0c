import type { FastifyInstance } from 'fastify';
import { badRequest } from './errors.js';

/**
 * How a JSON request body is read, the only rules on top of JSON itself:
 *
 * - JSON is the only body type (multipart uploads aside, in their route's scope): any other is 415.
 * - No body at all, where the route's body has no required field, is `{}`.
 * - A request with `Content-Type: application/json` and no body (many HTTP clients send the header
 *   on every request) reaches a route that takes no body (a DELETE, an archive) or one whose
 *   fields are all optional; an empty body where a field is required is still malformed JSON.
 * - A string holding a NUL character or a lone UTF-16 surrogate (both can only come from a `\u`
 *   escape) is a 400 naming the field, before anything runs: PostgreSQL can store neither, and a
 *   generation that got that far would fail at its end, after the model had been paid for.
 */
export function registerJsonBody(app: FastifyInstance): void {
  // A body whose fields are all optional may be left out altogether (e.g. regenerate's `stream`):
  // no body reads as `{}`, as an empty object would.
  app.addHook('preValidation', (request, _reply, done) => {
    const schema = request.routeOptions.schema?.body;
    if (request.body === undefined && schema && !requiresBody(schema)) request.body = {};
    done();
  });
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  // No route reads plain text: such a body is a 415 like any other type that is not JSON (Fastify's
  // own text parser made it a string, and then a 400 "body must be object").
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    const body = text as string;
    if (body === '' && !requiresBody(request.routeOptions.schema?.body)) return done(null, undefined);
    parseJson(request, body, (err, value) => {
      if (err) return done(err, undefined);
      const field = UNSTORABLE_ESCAPE.test(body) ? unstorableField(value, '') : null;
      if (field === null) return done(null, value);
      const name = field || 'body';
      done(badRequest(`Invalid field: ${name} ${UNSTORABLE}`, { [name]: [UNSTORABLE] }), undefined);
    });
  });
}

/** Whether a route's body schema needs a body: one with a required field (no schema: none needed). */
function requiresBody(schema: unknown): boolean {
  const body = schema as { type?: string; required?: string[] } | undefined;
  return body !== undefined && !(body.type === 'object' && !body.required?.length);
}

const UNSTORABLE = 'must not contain a NUL character or a lone surrogate';
/** The escapes that can produce such a character: worth a walk of the parsed body only then. */
const UNSTORABLE_ESCAPE = /\\u(?:0000|d[89a-f])/i;
// biome-ignore lint/suspicious/noControlCharactersInRegex: the NUL character is what it looks for
const UNSTORABLE_TEXT = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The dotted path of the first string (value or key) holding such a character, or null. */
function unstorableField(value: unknown, path: string): string | null {
  if (typeof value === 'string') return UNSTORABLE_TEXT.test(value) ? path : null;
  if (typeof value !== 'object' || value === null) return null;
  for (const [key, item] of Object.entries(value)) {
    const at = path ? `${path}.${key}` : key;
    if (UNSTORABLE_TEXT.test(key)) return at;
    const found = unstorableField(item, at);
    if (found !== null) return found;
  }
  return null;
}
