import { type TSchema, type TUnsafe, Type } from '@sinclair/typebox';

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/**
 * A property with a `default`: optional in the JSON schema (so OpenAPI and generated clients may
 * omit it), yet typed as present, because validation (`useDefaults`) fills it in before a
 * handler runs.
 */
export const Defaulted = <T extends TSchema>(schema: T): T => {
  if (schema.default === undefined) throw new Error('Defaulted() needs a schema with a default');
  return Type.Optional(schema) as unknown as T;
};

/**
 * A closed list of strings, as a JSON Schema `enum` (typed clients get the union): an unknown value
 * is a rule violation (422 naming the field and the values allowed, src/http/errors.ts) like
 * every other well-formed but unacceptable value, not a 400 "must be equal to constant" per value.
 */
export const OneOf = <T extends string>(values: readonly T[]): TUnsafe<T> =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], examples: [values[0]] });

/** At least one character that is not whitespace: a name of only spaces names nothing. */
export const NOT_BLANK = '\\S';

/** A resource's name: 1 to `maxLength` characters, not all whitespace (422 `must not be blank`). */
export const NameText = (maxLength: number, description?: string) =>
  Type.String({ minLength: 1, maxLength, pattern: NOT_BLANK, ...(description ? { description } : {}) });

export const Timestamp = Type.String({
  description: 'UTC, microsecond precision: YYYY-MM-DDTHH:MM:SS.ffffffZ',
});

/** A database id in a path or body: int4, so larger values are a 400, not a database error. */
export const Id = (options: { description?: string } = {}) =>
  Type.Integer({ minimum: 1, maximum: 2147483647, ...options });

export const IdParams = Type.Object({ id: Id() });

export const V1Error = Type.Object(
  {
    error: Type.Object({
      message: Type.String(),
      code: Type.String({ description: 'Stable snake_case identifier' }),
      details: Type.Record(Type.String(), Type.Array(Type.String()), { description: 'Field -> messages' }),
    }),
  },
  { title: 'V1Error' },
);

export const V2Error = Type.Object(
  {
    status: Type.Literal('error'),
    response: Type.Object(
      {
        code: Type.Integer({ description: 'The HTTP status' }),
        error: Type.String({ description: 'Stable snake_case identifier' }),
        message: Type.String(),
        chat_id: Type.Optional(Type.Integer({ description: 'On a failed create: the chat that was kept' })),
      },
      { additionalProperties: true },
    ),
  },
  { title: 'V2Error' },
);

/** Route response schemas plus the v1 error statuses, so OpenAPI shows them. */
export const v1Responses = <T extends Record<number, TSchema>>(success: T) => ({
  ...success,
  400: V1Error,
  401: V1Error,
  403: V1Error,
  404: V1Error,
  422: V1Error,
  429: V1Error,
});

export const v2Responses = <T extends Record<number, TSchema>>(success: T) => ({
  ...success,
  400: V2Error,
  401: V2Error,
  402: V2Error,
  403: V2Error,
  404: V2Error,
  409: V2Error,
  429: V2Error,
  500: V2Error,
  504: V2Error,
});

export const Message = Type.Object({ message: Type.String() }, { title: 'StatusMessage' });

/** v2 success envelope; named after its content (`ChatRead` -> `ChatReadResponse`) in OpenAPI. */
export const ok = <T extends TSchema>(response: T) =>
  Type.Object(
    { status: Type.Literal('ok'), response },
    response.title ? { title: `${response.title}Response` } : {},
  );
