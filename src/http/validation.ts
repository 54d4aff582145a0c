import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

const common = { allErrors: true, useDefaults: true, removeAdditional: false, strict: false } as const;

// Bodies are never coerced ("true" is not a boolean); query strings and paths are text by nature.
const bodyAjv = addFormats.default(new Ajv.default({ ...common, coerceTypes: false }));
const textAjv = addFormats.default(new Ajv.default({ ...common, coerceTypes: 'array' }));

export const validatorCompiler: FastifySchemaCompiler<any> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? bodyAjv : textAjv).compile(schema);
