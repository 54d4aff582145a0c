import type { LanguageModelV3 } from '@ai-sdk/provider';
import { type Static, Type } from '@sinclair/typebox';
import { generateText, wrapLanguageModel } from 'ai';
import Ajv from 'ajv';
import Ajv2019 from 'ajv/dist/2019.js';
import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { ApiError, badRequest } from '../http/errors.js';
import type { Usage } from '../modules/credits/service.js';

/**
 * `response_format` (issue 18): the reply must be JSON that follows a JSON Schema (2020-12). The
 * provider's native structured output is asked for (the model call's `responseFormat`: json_schema
 * where the provider has it, JSON mode otherwise), the system prompt carries the schema as an
 * instruction for every provider, and the reply is validated here with one repair attempt.
 */
export const ResponseFormat = Type.Object(
  {
    type: Type.Literal('json_schema'),
    json_schema: Type.Object({
      name: Type.String({
        minLength: 1,
        maxLength: 64,
        pattern: '^[A-Za-z0-9_-]+$',
        description: 'A name for the schema (letters, digits, `_` and `-`)',
      }),
      description: Type.Optional(Type.String({ maxLength: 2000 })),
      schema: Type.Record(Type.String(), Type.Unknown(), {
        description:
          'A JSON Schema the reply must follow: 2020-12, or 2019-09 or draft-07 when its `$schema` says so',
      }),
    }),
  },
  {
    title: 'ResponseFormat',
    description:
      'The reply must be JSON following this JSON Schema: its content is the JSON text and `parsed` the value. Validated (one repair attempt); a reply that still does not match fails with 500 `invalid_structured_output`.',
  },
);
export type ResponseFormat = Static<typeof ResponseFormat>;

/** Largest schema accepted, serialized: it goes into every model call's prompt. */
const MAX_SCHEMA_CHARS = 20_000;
const MAX_REPORTED_ERRORS = 10;

export interface StructuredOutput {
  format: ResponseFormat;
  validate: ValidateFunction;
}

const options = { allErrors: true, strict: false, validateFormats: true } as const;
/**
 * One validator per JSON Schema version a schema may declare in `$schema` (generators often write
 * draft-07's); without one, 2020-12. Older drafts (04, 06) are a 400 naming the versions accepted.
 */
const DIALECTS: { pattern: RegExp; ajv: Ajv2020.default | Ajv.default }[] = [
  { pattern: /^https?:\/\/json-schema\.org\/draft\/2020-12\/schema#?$/, ajv: new Ajv2020.default(options) },
  { pattern: /^https?:\/\/json-schema\.org\/draft\/2019-09\/schema#?$/, ajv: new Ajv2019.default(options) },
  { pattern: /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/, ajv: new Ajv.default(options) },
];
for (const { ajv } of DIALECTS) addFormats.default(ajv);
const SUPPORTED = 'JSON Schema 2020-12 (the default), 2019-09 or draft-07';

/** Compiles the schema of a request's `response_format`: 400 when it is not a usable JSON Schema. */
export function compileResponseFormat(format: ResponseFormat | undefined): StructuredOutput | undefined {
  if (format === undefined) return undefined;
  const { schema } = format.json_schema;
  const invalid = (why: string) =>
    badRequest(`response_format.json_schema.schema is not a valid JSON Schema: ${why}`, {
      'response_format.json_schema.schema': [why],
    });
  if (JSON.stringify(schema).length > MAX_SCHEMA_CHARS)
    throw invalid(`longer than ${MAX_SCHEMA_CHARS} characters`);
  // The version is chosen here, so the schema is compiled without its `$schema` (Ajv would look
  // the URI up, and `https:` instead of draft-07's `http:` is still draft-07).
  const { $schema: declared, ...body } = schema;
  const dialect =
    declared === undefined
      ? DIALECTS[0]
      : DIALECTS.find((d) => typeof declared === 'string' && d.pattern.test(declared));
  if (!dialect) throw invalid(`$schema ${JSON.stringify(declared)} is not supported: use ${SUPPORTED}`);
  const { ajv } = dialect;
  try {
    if (!ajv.validateSchema(body)) throw invalid(ajv.errorsText(ajv.errors, { dataVar: 'schema' }));
    return { format, validate: ajv.compile(body) };
  } catch (err) {
    if (err instanceof ApiError) throw err;
    throw invalid(err instanceof Error ? err.message : String(err));
  }
}

/** The system prompt's instruction, for every provider (native structured output or not). */
export function structuredOutputInstruction(output: StructuredOutput): string {
  const { name, description, schema } = output.format.json_schema;
  return [
    `Your final reply must be a single JSON value (no prose, no code fence) that follows the JSON Schema "${name}"${description ? ` (${description})` : ''}:`,
    JSON.stringify(schema),
  ].join('\n');
}

/** The model, asking its provider for JSON following the schema on every call (native structured output). */
export function withStructuredOutput(model: LanguageModelV3, output: StructuredOutput): LanguageModelV3 {
  const { name, description, schema } = output.format.json_schema;
  return wrapLanguageModel({
    model,
    middleware: {
      specificationVersion: 'v3',
      // An OpenAI-compatible server gets JSON mode (json_schema is not assumed there); every
      // other provider the schema itself.
      transformParams: async ({ params, model: inner }) => ({
        ...params,
        responseFormat: inner.provider.startsWith('openai-compatible')
          ? { type: 'json' }
          : { type: 'json', name, description, schema: schema as never },
      }),
    },
  });
}

export interface SettledOutput {
  text: string;
  parsed: unknown;
}

/** Checks a reply; the errors in a readable form, or null when it is valid. */
export function checkReply(
  output: StructuredOutput,
  text: string,
): { parsed: unknown } | { errors: string[] } {
  const json = stripFence(text);
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch (err) {
    return { errors: [`the reply is not JSON (${err instanceof Error ? err.message : String(err)})`] };
  }
  if (output.validate(parsed)) return { parsed };
  return { errors: describeErrors(output.validate.errors ?? []) };
}

function describeErrors(errors: ErrorObject[]): string[] {
  const described = errors
    .slice(0, MAX_REPORTED_ERRORS)
    .map((e) => `${e.instancePath || '/'} ${e.message ?? 'is invalid'}`);
  if (errors.length > MAX_REPORTED_ERRORS) described.push(`and ${errors.length - MAX_REPORTED_ERRORS} more`);
  return described;
}

/** A reply wrapped in a Markdown code fence counts as its content. */
function stripFence(text: string): string {
  const match = /^\s*```(?:json)?\s*\n([\s\S]*?)\n?```\s*$/i.exec(text);
  return (match ? match[1] : text).trim();
}

/** 500 `invalid_structured_output`: the errors in the message (v2) and in `details` (v1). */
export function invalidStructuredOutput(errors: string[]): ApiError {
  return new ApiError(
    500,
    'invalid_structured_output',
    `The model's reply does not follow the response_format schema after one repair attempt: ${errors.join('; ')}`,
    { response_format: errors },
  );
}

/**
 * Validates the reply; an invalid one gets one repair call to the same model (the schema, the reply
 * and the errors, no tools). Returns the JSON text (fence removed) and its value, and the repair's
 * usage; throws `invalidStructuredOutput` when the repaired reply is still invalid.
 */
export async function settleStructuredOutput(
  output: StructuredOutput,
  text: string,
  repairWith: { model: LanguageModelV3; signal?: AbortSignal },
): Promise<SettledOutput & { usage: Usage }> {
  const usage: Usage = { inputTokens: 0, outputTokens: 0 };
  const first = checkReply(output, text);
  if ('parsed' in first) return { text: stripFence(text), parsed: first.parsed, usage };
  const repaired = await generateText({
    model: withStructuredOutput(repairWith.model, output),
    system: `You correct JSON so that it follows a JSON Schema. ${structuredOutputInstruction(output)}`,
    messages: [
      {
        role: 'user',
        content: [
          'This reply does not follow the schema:',
          text,
          'The problems:',
          ...first.errors.map((e) => `- ${e}`),
          'Answer with the corrected JSON only.',
        ].join('\n'),
      },
    ],
    maxRetries: 1,
    abortSignal: repairWith.signal,
  });
  usage.inputTokens += repaired.usage.inputTokens ?? 0;
  usage.outputTokens += repaired.usage.outputTokens ?? 0;
  const second = checkReply(output, repaired.text);
  if ('parsed' in second) return { text: stripFence(repaired.text), parsed: second.parsed, usage };
  throw Object.assign(invalidStructuredOutput(second.errors), { usage });
}
