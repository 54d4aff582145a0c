import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import type { FastifySwaggerUiOptions } from '@fastify/swagger-ui';
import type { Config } from '../config.js';

/** The API's name, shown by /openapi.json and the reference page at /docs. */
export const API_TITLE = 'Scriptorium API';

/** Tag order is the reference page's order: what integrators use most comes first. */
export const OPENAPI_TAGS = [
  { name: 'Chats', description: 'API v2: chats, messages, streamed turns, reattachment and cancellation.' },
  { name: 'Artifacts', description: 'Generate, refine, read and edit artifacts; fire-and-forget requests.' },
  { name: 'Artifact types', description: 'What artifacts can be made, addressed by slug.' },
  { name: 'Skills', description: 'Instruction templates that generate artifacts; slash commands in chats.' },
  { name: 'Documents', description: 'The knowledge base: uploaded documents searched by chats.' },
  { name: 'Projects', description: 'Projects scope chats, artifacts, documents and webhooks.' },
  { name: 'Webhooks', description: 'Signed event delivery (Standard Webhooks) and its delivery log.' },
  { name: 'Agents', description: 'Instructions, model and tools bundled for chats.' },
  { name: 'Integrations', description: 'Connected MCP tool servers.' },
  { name: 'Model configurations', description: 'Model providers, models and credit prices.' },
  { name: 'Groups', description: 'Who may reach which projects, categories and agents.' },
  { name: 'Categories', description: 'Groupings of projects.' },
  { name: 'Users', description: 'People of the organization.' },
  { name: 'API keys', description: 'Organization and personal keys.' },
  { name: 'Usage', description: 'Token and credit usage.' },
  {
    name: 'Audit events',
    description: 'Who changed what: every write of the management API, recorded with its change.',
  },
  { name: 'Organizations (super admin)', description: 'Tenants; super admin keys only.' },
  { name: 'Share pages', description: 'Public read-only artifact pages.' },
  { name: 'Operations', description: 'Liveness and readiness probes.' },
];

/** Operations whose stream a repeat may resume with `Last-Event-ID` (see docs/decisions.md). */
const RESUMABLE = new Set([
  'streamChat',
  'createChat',
  'sendMessage',
  'streamArtifactGeneration',
  'streamArtifactRefinement',
]);

/** Names of the shared error responses (`V1NotFound`, `V2Conflict`...). */
const STATUS_NAME: Record<string, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  402: 'PaymentRequired',
  403: 'Forbidden',
  404: 'NotFound',
  409: 'Conflict',
  413: 'PayloadTooLarge',
  422: 'UnprocessableEntity',
  429: 'TooManyRequests',
  500: 'InternalError',
  504: 'GatewayTimeout',
};

const STATUS_TEXT: Record<string, string> = {
  200: 'OK',
  201: 'Created',
  204: 'No content',
  400: 'Malformed or invalid parameters',
  401: 'Missing or unknown API key',
  402: 'The organization has no credits left',
  403: 'The key may not do this',
  404: 'Not found (or not visible to this key)',
  409: 'Conflicts with the current state',
  413: 'Body too large',
  422: 'Well-formed but breaks a rule',
  429: 'Rate limit reached; see Retry-After',
  500: 'Internal or model provider error',
  503: 'Not ready',
  504: 'No reply within REPLY_TIMEOUT_MS',
};

type Json = Record<string, any>;
const METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const SCHEMA_NAME = /^[A-Z][A-Za-z0-9]*$/;

/**
 * Moves every schema carrying a `title` (set where it is declared, e.g. `{ title: 'Chat' }`) into
 * `components.schemas` under that title and references it, innermost first. Routes keep plain
 * inline TypeBox schemas, so validation and serialization are untouched; only the published
 * document is normalised. Two different schemas with one title are a programming error.
 * Parameters stay inline: swagger has already split their schemas into parameter objects.
 */
function hoistNamedSchemas(document: Json): void {
  document.components.schemas ??= {};
  const schemas: Json = document.components.schemas;
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(visit);
    if (!node || typeof node !== 'object') return node;
    const out: Json = {};
    for (const [key, value] of Object.entries(node)) out[key] = visit(value);
    const title = out.title;
    if (typeof title !== 'string' || !SCHEMA_NAME.test(title) || !('type' in out || 'anyOf' in out)) {
      return out;
    }
    const existing = schemas[title];
    if (existing && JSON.stringify(existing) !== JSON.stringify(out)) {
      throw new Error(`OpenAPI: two different schemas are named ${title}`);
    }
    schemas[title] = out;
    return { $ref: `#/components/schemas/${title}` };
  };
  for (const item of Object.values<Json>(document.paths)) {
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      for (const media of Object.values<Json>(operation.requestBody?.content ?? {})) {
        media.schema = visit(media.schema);
      }
      for (const response of Object.values<Json>(operation.responses ?? {})) {
        for (const media of Object.values<Json>(response.content ?? {})) media.schema = visit(media.schema);
      }
    }
  }
}

/** Header parameters, status texts and stream responses that route schemas cannot express. */
function completeOperations(document: Json): void {
  document.components.responses ??= {};
  const responses: Json = document.components.responses;
  for (const [path, item] of Object.entries<Json>(document.paths)) {
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const parameters: Json[] = operation.parameters ?? [];
      // Every authenticated POST honours Idempotency-Key (src/http/idempotency.ts).
      if (method === 'post' && path.startsWith('/api/')) {
        parameters.push({ $ref: '#/components/parameters/IdempotencyKey' });
      }
      if (RESUMABLE.has(operation.operationId)) {
        parameters.push({ $ref: '#/components/parameters/LastEventId' });
      }
      if (parameters.length > 0) operation.parameters = parameters;
      // A body with no required field may be left out (src/http/json-body.ts).
      if (operation.requestBody && !bodyHasRequiredField(document, operation.requestBody)) {
        operation.requestBody.required = false;
      }
      for (const [status, response] of Object.entries<Json>(operation.responses ?? {})) {
        if (response.description !== 'Default Response') continue;
        response.description = STATUS_TEXT[status] ?? `HTTP ${status}`;
        // A family's error body under a plain status is one shared response, not a copy per operation.
        const media = Object.keys(response.content ?? {});
        const ref: string | undefined = response.content?.['application/json']?.schema?.$ref;
        const family = ref?.match(/\/(V[12])Error$/)?.[1];
        if (media.length === 1 && family && STATUS_NAME[status]) {
          const name = `${family}${STATUS_NAME[status]}`;
          responses[name] ??= response;
          operation.responses[status] = { $ref: `#/components/responses/${name}` };
        }
      }
    }
  }
}

function bodyHasRequiredField(document: Json, requestBody: Json): boolean {
  let schema: Json | undefined = requestBody.content?.['application/json']?.schema;
  const ref: string | undefined = schema?.$ref;
  if (ref?.startsWith('#/components/schemas/')) schema = document.components?.schemas?.[ref.slice(21)];
  return !(schema?.type === 'object' && !schema.required?.length);
}

const EVENT_STREAM = {
  'text/event-stream': {
    schema: {
      type: 'string',
      description:
        'Server-Sent Events. Chat turns: `content`, `tool_start`, `tool_result`, then `done` or `error`, each with an `id:` (its sequence number in the turn). Artifacts: `content`, then `done` or `error`. Event payloads are described in /asyncapi.json.',
    },
  },
};

/** The streamed variants of operations whose JSON answer is declared by the route. */
function addStreamResponses(document: Json): void {
  const chats = document.paths['/api/v2/chats'];
  const messages = document.paths['/api/v2/chats/{id}/messages'];
  if (chats?.post) {
    chats.post.responses['200'] = {
      description: 'With `stream: true` and `content`: the first turn as Server-Sent Events',
      content: EVENT_STREAM,
    };
  }
  if (messages?.post) {
    const ok = messages.post.responses['200'];
    ok.description = 'The reply; with `stream: true`, the turn as Server-Sent Events';
    Object.assign(ok.content, EVENT_STREAM);
  }
}

/** Paths in tag order (chats first), so every renderer lists them that way. */
function orderPaths(document: Json): void {
  const rank = (item: Json) =>
    Math.min(
      ...METHODS.flatMap((m) => item[m]?.tags ?? []).map((tag: string) => {
        const i = OPENAPI_TAGS.findIndex((t) => t.name === tag);
        return i < 0 ? OPENAPI_TAGS.length : i;
      }),
    );
  const entries = Object.entries<Json>(document.paths);
  // Array.prototype.sort is stable: within a tag, paths keep their registration order.
  entries.sort(([, a], [, b]) => rank(a) - rank(b));
  document.paths = Object.fromEntries(entries);
}

/** Options of `@fastify/swagger`: the document every client is generated from. */
export function openApiOptions(config: Config): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: API_TITLE,
        version: '1.0.0',
        description:
          'Chats (API v2), artifacts, knowledge base and management (API v1) of a self-hosted Scriptorium. Every /api request carries `Authorization: Bearer <API_KEY>`. Stream events are described in /asyncapi.json.',
        contact: { name: 'Scriptorium operators', url: `${config.publicBaseUrl}/docs` },
      },
      servers: [{ url: config.publicBaseUrl, description: 'This Scriptorium server' }],
      tags: OPENAPI_TAGS,
      components: {
        securitySchemes: {
          bearer: {
            type: 'http',
            scheme: 'bearer',
            description: 'An API key (sk_org_..., sk_usr_..., sk_adm_...)',
          },
        },
        parameters: {
          IdempotencyKey: {
            name: 'Idempotency-Key',
            in: 'header',
            required: false,
            description:
              'Makes the POST safe to retry for 24 hours: a repeat with the same body gets the first answer (a streamed one reattaches to the same stream); a different body is 422, a repeat while the first runs is 409.',
            schema: { type: 'string', minLength: 1, maxLength: 255 },
          },
          LastEventId: {
            name: 'Last-Event-ID',
            in: 'header',
            required: false,
            description:
              'Resume a stream after this event id. On a POST it applies only to an idempotent repeat (same Idempotency-Key and body); a new POST always starts a new turn.',
            schema: { type: 'string', pattern: '^\\d{1,9}$' },
          },
        },
      },
      security: [{ bearer: [] }],
    },
    transformObject: (documentObject) => {
      if (!('openapiObject' in documentObject)) return documentObject.swaggerObject;
      const document = structuredClone(documentObject.openapiObject) as Json;
      hoistNamedSchemas(document);
      completeOperations(document);
      addStreamResponses(document);
      orderPaths(document);
      return document;
    },
  };
}

// The reference page's header: the service's own name instead of the framework's logo.
const LOGO = `<svg xmlns="http://www.w3.org/2000/svg" width="220" height="40" viewBox="0 0 220 40">
<rect x="2" y="6" width="24" height="28" rx="3" fill="#f5efe0" stroke="#7a5c2e" stroke-width="2"/>
<path d="M8 14h12M8 20h12M8 26h8" stroke="#7a5c2e" stroke-width="2" stroke-linecap="round"/>
<text x="36" y="28" font-family="Georgia, 'Times New Roman', serif" font-size="22" fill="#ffffff">Scriptorium API</text>
</svg>`;
const FAVICON = `<svg xmlns="http://www.w3.org/2000/svg" width="32" height="32" viewBox="0 0 32 32">
<rect x="4" y="2" width="24" height="28" rx="3" fill="#f5efe0" stroke="#7a5c2e" stroke-width="2"/>
<path d="M10 10h12M10 16h12M10 22h8" stroke="#7a5c2e" stroke-width="2" stroke-linecap="round"/>
</svg>`;

/** `@fastify/swagger-ui` at /docs: served from the package itself, no CDN (works offline). */
export const referencePageOptions: FastifySwaggerUiOptions = {
  routePrefix: '/docs',
  logo: { type: 'image/svg+xml', content: LOGO, href: '/docs' },
  theme: {
    title: API_TITLE,
    favicon: [
      { filename: 'favicon.svg', rel: 'icon', type: 'image/svg+xml', sizes: '32x32', content: FAVICON },
    ],
  },
  uiConfig: { docExpansion: 'list', deepLinking: true, displayOperationId: true },
  validatorUrl: false,
};
