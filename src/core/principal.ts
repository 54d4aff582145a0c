import type { KeyKind } from '../modules/api-keys/secrets.js';

export type Role = 'admin' | 'member' | 'super_admin';

/** Who is calling: resolved from the API key by src/http/auth.ts, or restored by a background job. */
export interface Principal {
  kind: KeyKind;
  keyId: number;
  organizationId: number | null;
  userId: number | null;
  role: Role;
}

/** A principal acting inside one organization (organization or personal key). */
export interface OrgPrincipal extends Principal {
  organizationId: number;
}
