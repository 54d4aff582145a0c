import { createHash } from 'node:crypto';

/** What OpenAI and Anthropic accept as a function name. */
export const PROVIDER_TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const MAX = 64;
const SEPARATOR = '__';

/**
 * The name the model sees for `tool` of the integration with `slug`: `<slug>__<tool>`. Slugs are
 * unique per organization and never contain `__`, so two servers' tools cannot clash. Characters
 * providers refuse become `_`; a name too long, or equal to one already `taken` after that
 * rewriting, is shortened and ends with a hash of the original so it stays unique and stable.
 */
export function namespacedToolName(slug: string, tool: string, taken: ReadonlySet<string>): string {
  const prefix = `${slug}${SEPARATOR}`;
  const clean = tool.replace(/[^a-zA-Z0-9_-]/g, '_') || 'tool';
  const plain = `${prefix}${clean}`;
  if (plain.length <= MAX && clean === tool && !taken.has(plain)) return plain;
  const hash = createHash('sha256').update(tool).digest('hex').slice(0, 8);
  const room = MAX - prefix.length - hash.length - 1;
  let name = `${prefix}${clean.slice(0, Math.max(room, 1))}_${hash}`.slice(0, MAX);
  for (let n = 2; taken.has(name); n++) name = `${name.slice(0, MAX - String(n).length - 1)}_${n}`;
  return name;
}
