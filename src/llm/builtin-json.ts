/**
 * The built-in offline model's answer to a request for JSON (`response_format`): a value that
 * follows the schema, built from its keywords (const, enum, default, examples, type, required
 * properties, item counts, string lengths). It says nothing true about the question; it shows the
 * shape a real model's answer takes.
 */
const MAX_DEPTH = 8;

export function exampleOf(schema: unknown, depth = 0): unknown {
  if (!isRecord(schema) || depth > MAX_DEPTH) return null;
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if ('default' in schema) return schema.default;
  if (Array.isArray(schema.examples) && schema.examples.length > 0) return schema.examples[0];
  for (const key of ['allOf', 'anyOf', 'oneOf'] as const) {
    const options = schema[key];
    if (Array.isArray(options) && options.length > 0) {
      if (key !== 'allOf') return exampleOf(options[0], depth + 1);
      return options.reduce<unknown>((merged, option) => merge(merged, exampleOf(option, depth + 1)), {});
    }
  }
  const type = Array.isArray(schema.type) ? (schema.type.find((t) => t !== 'null') ?? 'null') : schema.type;
  switch (type ?? (isRecord(schema.properties) ? 'object' : schema.items ? 'array' : 'string')) {
    case 'object': {
      const properties = isRecord(schema.properties) ? schema.properties : {};
      const required = Array.isArray(schema.required) ? schema.required.map(String) : [];
      const value: Record<string, unknown> = {};
      for (const name of new Set([...Object.keys(properties), ...required]))
        value[name] = exampleOf(properties[name] ?? {}, depth + 1);
      return value;
    }
    case 'array': {
      const count = typeof schema.minItems === 'number' ? Math.max(schema.minItems, 1) : 1;
      const items = Array.isArray(schema.prefixItems) ? schema.prefixItems : [];
      return Array.from({ length: Math.min(Math.max(count, items.length), 20) }, (_, i) =>
        exampleOf(items[i] ?? schema.items ?? {}, depth + 1),
      );
    }
    case 'integer':
    case 'number': {
      const low =
        typeof schema.minimum === 'number'
          ? schema.minimum
          : typeof schema.exclusiveMinimum === 'number'
            ? schema.exclusiveMinimum + 1
            : 0;
      const value = type === 'integer' ? Math.ceil(low) : low;
      return typeof schema.maximum === 'number' ? Math.min(value, schema.maximum) : value;
    }
    case 'boolean':
      return false;
    case 'null':
      return null;
    default:
      return exampleString(schema);
  }
}

function exampleString(schema: Record<string, unknown>): string {
  const formats: Record<string, string> = {
    'date-time': '2025-01-01T00:00:00Z',
    date: '2025-01-01',
    time: '00:00:00Z',
    email: 'offline@example.com',
    uri: 'https://example.com/',
    url: 'https://example.com/',
    uuid: '00000000-0000-4000-8000-000000000000',
  };
  const format = typeof schema.format === 'string' ? formats[schema.format] : undefined;
  let text = format ?? 'offline model: no provider configured';
  const min = typeof schema.minLength === 'number' ? schema.minLength : 0;
  const max = typeof schema.maxLength === 'number' ? schema.maxLength : Number.POSITIVE_INFINITY;
  while (text.length < min) text += ' …';
  return text.slice(0, Math.max(min, Math.min(text.length, max)));
}

function merge(a: unknown, b: unknown): unknown {
  return isRecord(a) && isRecord(b) ? { ...a, ...b } : b;
}

function isRecord(value: unknown): value is Record<string, any> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
