import { useState } from 'preact/hooks';
import { api } from '../api';
import { nameOf, type Refs, ResourcePage, type ResourceSpec } from '../crud';
import { isAdmin } from '../session';
import { ConfirmButton, ErrorMessage, Field, useAction } from '../ui';

interface Group {
  id: number;
  name: string;
  description: string;
  is_default: boolean;
  user_ids: number[];
}

function Members({ group, reload, refs }: { group: Group; reload: () => void; refs: Refs }) {
  const [userId, setUserId] = useState('');
  const { busy, error, run } = useAction();
  const users: any[] = refs.users ?? [];
  const candidates = users.filter((u) => !group.user_ids.includes(u.id));
  return (
    <div class="stack">
      <h3>Members of {group.name}</h3>
      {group.user_ids.length === 0 ? <p class="empty">No members yet.</p> : null}
      <ul class="plain">
        {group.user_ids.map((id) => (
          <li key={id} class="row">
            <span>{nameOf(users, id, 'email')}</span>
            {isAdmin() ? (
              <ConfirmButton
                label="Remove"
                onConfirm={async () => {
                  await api('DELETE', `/api/v1/groups/${group.id}/members/${id}`);
                  reload();
                }}
              />
            ) : null}
          </li>
        ))}
      </ul>
      {isAdmin() ? (
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            if (!userId) return;
            void run(async () => {
              await api('POST', `/api/v1/groups/${group.id}/members`, { body: { user_id: Number(userId) } });
              setUserId('');
              reload();
            });
          }}
        >
          <Field label="Add a user">
            {(id) => (
              <select id={id} value={userId} onChange={(e) => setUserId(e.currentTarget.value)}>
                <option value="">Choose a user…</option>
                {candidates.map((u) => (
                  <option key={u.id} value={String(u.id)}>
                    {u.email}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <button type="submit" disabled={busy || !userId}>
            Add member
          </button>
        </form>
      ) : null}
      <ErrorMessage error={error} />
    </div>
  );
}

const spec: ResourceSpec<Group> = {
  title: 'Groups',
  singular: 'group',
  path: '/api/v1/groups',
  listKey: 'groups',
  itemKey: 'group',
  empty: 'No groups yet.',
  refs: { users: ['/api/v1/users', 'users'] },
  columns: [
    { label: 'Name', render: (g) => (g.is_default ? `${g.name} (default)` : g.name) },
    { label: 'Description', render: (g) => g.description || '—' },
    { label: 'Members', render: (g) => String(g.user_ids.length) },
  ],
  fields: [
    { name: 'name', label: 'Name', kind: 'text', required: true },
    { name: 'description', label: 'Description', kind: 'textarea' },
  ],
  canDelete: (g) => !g.is_default,
  detail: (g, reload, refs) => <Members group={g} reload={reload} refs={refs} />,
};

export function GroupsPage() {
  return <ResourcePage spec={spec} />;
}
