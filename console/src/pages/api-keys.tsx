import { nameOf, ResourcePage, type ResourceSpec } from '../crud';
import { formatDate, SecretOnce } from '../ui';

interface ApiKey {
  id: number;
  kind: string;
  name: string;
  prefix: string;
  user_id: number | null;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

const spec: ResourceSpec<ApiKey> = {
  title: 'API keys',
  singular: 'key',
  path: '/api/v1/api_keys',
  listKey: 'api_keys',
  itemKey: 'api_key',
  empty: 'No keys yet.',
  editable: false,
  deleteLabel: 'Revoke',
  intro: (
    <p class="muted">
      An organization key acts as an organization admin; a personal key acts as its user. The secret is shown
      once, when the key is created.
    </p>
  ),
  refs: { users: ['/api/v1/users', 'users'] },
  columns: [
    { label: 'Name', render: (k) => k.name || '—' },
    { label: 'Kind', render: (k) => k.kind },
    { label: 'Prefix', render: (k) => <code>{k.prefix}</code> },
    { label: 'User', render: (k, refs) => (k.user_id ? nameOf(refs.users, k.user_id, 'email') : '—') },
    { label: 'Last used', render: (k) => formatDate(k.last_used_at) },
    { label: 'Status', render: (k) => (k.revoked_at ? `revoked ${formatDate(k.revoked_at)}` : 'active') },
  ],
  canDelete: (k) => !k.revoked_at,
  fields: [
    { name: 'name', label: 'Name', kind: 'text', hint: 'What the key is for' },
    {
      name: 'kind',
      label: 'Kind',
      kind: 'select',
      required: true,
      options: () => [
        { id: 'organization', label: 'organization' },
        { id: 'personal', label: 'personal (acts as a user)' },
      ],
    },
    {
      name: 'user_id',
      label: 'User (personal keys)',
      kind: 'select',
      options: (refs) => (refs.users ?? []).map((u) => ({ id: u.id, label: u.email })),
    },
  ],
  afterCreate: (response) => (
    <SecretOnce
      label={`New key ${response.api_key?.name || response.api_key?.prefix}`}
      value={response.key}
    />
  ),
};

export function ApiKeysPage() {
  return <ResourcePage spec={spec} />;
}
