import Ajv, { type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

const common = { allErrors: true, useDefaults: true, removeAdditional: false, strict: false } as const;

// Bodies are never coerced ("true" is not a boolean); query strings and paths are text by nature.
const bodyAjv = addFormats.default(new Ajv.default({ ...common, coerceTypes: false }));
const textAjv = addFormats.default(new Ajv.default({ ...common, coerceTypes: 'array' }));

/** How an integer is written in a path or query string: decimal digits, nothing else. */
const INTEGER_TEXT = /^-?[0-9]+$/;

export const validatorCompiler: FastifySchemaCompiler<any> = ({ schema, httpPart }) =>
  httpPart === 'body' ? bodyAjv.compile(schema) : integersAsDigits(schema, textAjv.compile(schema));

type Validate = ValidateFunction;

/**
 * Ajv's coercion reads a text as JavaScript's `Number` does, so `1e1`, `0x2`, `1.0` and ` 1`
 * would pass as integers (a page 10, chat 10): an integer in a path or query string must be
 * written in digits, or the request gets the same 400 as `abc`.
 */
function integersAsDigits(schema: any, validate: Validate): Validate {
  const names = Object.entries<any>(schema?.properties ?? {})
    .filter(([, property]) => property?.type === 'integer')
    .map(([name]) => name);
  if (names.length === 0) return validate;
  const checked = ((data: any, context?: any) => {
    for (const name of names) {
      const text = data?.[name];
      if (typeof text === 'string' && !INTEGER_TEXT.test(text)) {
        checked.errors = [
          {
            instancePath: `/${name}`,
            schemaPath: `#/properties/${name}/type`,
            keyword: 'type',
            params: { type: 'integer' },
            message: 'must be integer',
          },
        ];
        return false;
      }
    }
    const valid = validate(data, context);
    checked.errors = validate.errors;
    return valid;
  }) as Validate;
  // Fastify passes the request as parent data to validators that have this (so Ajv can coerce).
  checked.schemaEnv = validate.schemaEnv;
  return checked;
}
