import { namesOf, ResourcePage, type ResourceSpec } from '../crud';
import { formatDate } from '../ui';

interface User {
  id: number;
  email: string;
  name: string;
  role: 'admin' | 'member';
  group_ids: number[];
  created_at: string;
}

const spec: ResourceSpec<User> = {
  title: 'Users',
  singular: 'user',
  path: '/api/v1/users',
  listKey: 'users',
  itemKey: 'user',
  empty: 'No users yet.',
  intro: (
    <p class="muted">
      Users act through personal keys (create one on the API keys page). Members reach only the projects and
      agents of their groups and cannot change management resources.
    </p>
  ),
  refs: { groups: ['/api/v1/groups', 'groups'] },
  columns: [
    { label: 'Email', render: (u) => u.email },
    { label: 'Name', render: (u) => u.name || '—' },
    { label: 'Role', render: (u) => u.role },
    { label: 'Groups', render: (u, refs) => namesOf(refs.groups, u.group_ids) },
    { label: 'Created', render: (u) => formatDate(u.created_at) },
  ],
  fields: [
    { name: 'email', label: 'Email', kind: 'email', required: true },
    { name: 'name', label: 'Name', kind: 'text' },
    {
      name: 'role',
      label: 'Role',
      kind: 'select',
      options: () => [
        { id: 'member', label: 'member' },
        { id: 'admin', label: 'admin' },
      ],
    },
  ],
};

export function UsersPage() {
  return <ResourcePage spec={spec} />;
}
