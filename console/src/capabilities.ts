import { ApiError } from './api';
import { type Capabilities, keyKindOf, type Role } from './session';

/** The list endpoints behind the console's pages; each is probed once per sign-in. */
export const PROBED = [
  '/api/v1/projects',
  '/api/v1/groups',
  '/api/v1/categories',
  '/api/v1/users',
  '/api/v1/api_keys',
  '/api/v1/artifact_types',
  '/api/v1/skills',
  '/api/v1/agents',
  '/api/v1/model_configurations',
  '/api/v1/integrations',
  '/api/v1/data_center/documents',
  '/api/v2/chats',
  '/api/v1/usage',
  '/api/v1/admin/organizations',
] as const;

/**
 * What a key may do, asked of the service rather than guessed: usage is for organization admins
 * only, the organizations list for super admin keys only; every page's list is probed.
 * Throws when the key is not accepted at all.
 */
export async function discoverCapabilities(key: string): Promise<Capabilities> {
  const statuses = await Promise.all(
    PROBED.map(async (path) => {
      const res = await fetch(`${path}?page_size=1`, {
        headers: { authorization: `Bearer ${key}` },
        cache: 'no-store',
      }).catch(() => null);
      return [path, res?.status ?? 0] as const;
    }),
  );
  const readable = new Set(statuses.filter(([, status]) => status === 200).map(([path]) => path));
  if (readable.size === 0) {
    const network = statuses.every(([, status]) => status === 0);
    throw new ApiError(
      network ? 0 : 401,
      network ? 'network_error' : 'invalid_api_key',
      network
        ? 'The service cannot be reached.'
        : 'The service does not accept this key (invalid, revoked, or its organization is deactivated).',
    );
  }
  let role: Role = 'member';
  if (readable.has('/api/v1/admin/organizations')) role = 'super_admin';
  else if (readable.has('/api/v1/usage')) role = 'admin';
  return { role, readable, keyKind: keyKindOf(key) };
}
