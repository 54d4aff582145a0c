import { hash, randomBytes } from 'node:crypto';

export type KeyKind = 'organization' | 'personal' | 'super_admin';

const PREFIX: Record<KeyKind, string> = {
  organization: 'sk_org_',
  personal: 'sk_usr_',
  super_admin: 'sk_adm_',
};

// One-shot `hash` (Node 20.12): a third of createHash's cost; it runs twice per request (auth, rate limit).
export const hashKey = (secret: string) => hash('sha256', secret, 'hex');

/** A 256-bit random secret with a visible kind prefix; only its SHA-256 is stored. */
export function newKeySecret(kind: KeyKind) {
  const secret = PREFIX[kind] + randomBytes(32).toString('base64url');
  return { secret, hash: hashKey(secret), prefix: secret.slice(0, PREFIX[kind].length + 6) };
}
