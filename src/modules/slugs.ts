import slugify from '@sindresorhus/slugify';

const MAX_SLUG_LENGTH = 80;
const SLUG = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;

/**
 * DESIGN.md 4: lower-case ASCII words joined by hyphens. Names with nothing transliterable
 * (only punctuation, or scripts without a Latin reading) fall back to `fallback`.
 * `decamelize` is off so that an alphanumeric run stays one word: "Draft E0526964443B" gives
 * `draft-e0526964443b`, not `draft-e0526964443-b` (issue 16).
 */
export function slugOf(name: string, fallback: string): string {
  const slug = slugify(name, { separator: '-', lowercase: true, decamelize: false })
    .slice(0, MAX_SLUG_LENGTH)
    .replace(/-+$/, '');
  return SLUG.test(slug) ? slug : fallback;
}

/** The first of `base`, `base-2`, `base-3`... that is not in `taken`. */
export function firstFreeSlug(base: string, taken: Iterable<string>): string {
  const used = new Set(taken);
  if (!used.has(base)) return base;
  for (let n = 2; ; n++) {
    const candidate = `${base}-${n}`;
    if (!used.has(candidate)) return candidate;
  }
}

/** A LIKE pattern matching `base-<anything>`, with LIKE's wildcards in `base` escaped. */
export const suffixedPattern = (base: string) => `${base.replace(/[\\%_]/g, '\\$&')}-%`;

function isUniqueViolation(error: unknown): boolean {
  for (let e = error as any, depth = 0; e && depth < 5; e = e.cause, depth++) {
    if (e.code === '23505') return true;
  }
  return false;
}

/**
 * Runs `attempt` again when a concurrent insert took the slug it chose (a unique violation);
 * each attempt reads the taken slugs afresh.
 */
export async function retryOnSlugClash<T>(attempt: () => Promise<T>, tries = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await attempt();
    } catch (error) {
      if (i >= tries || !isUniqueViolation(error)) throw error;
    }
  }
}
