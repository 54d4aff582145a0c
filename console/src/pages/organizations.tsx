import { useState } from 'preact/hooks';
import { api } from '../api';
import { ResourcePage, type ResourceSpec } from '../crud';
import { ErrorMessage, formatDate, SecretOnce, useAction } from '../ui';

interface Organization {
  id: number;
  name: string;
  active: boolean;
  credit_balance: number;
  created_at: string;
}

function AddCredits({ org, reload }: { org: Organization; reload: () => void }) {
  const [amount, setAmount] = useState('');
  const { busy, error, run } = useAction();
  const id = `credits-${org.id}`;
  return (
    <form
      class="row inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        void run(async () => {
          await api('POST', `/api/v1/admin/organizations/${org.id}/credits`, {
            body: { amount: Number(amount) },
          });
          setAmount('');
          reload();
        });
      }}
    >
      <label class="sr-only" for={id}>
        Credits to add to {org.name}
      </label>
      <input
        id={id}
        type="number"
        step="any"
        required
        placeholder="Credits"
        value={amount}
        onInput={(e) => setAmount(e.currentTarget.value)}
      />
      <button type="submit" class="secondary" disabled={busy || !amount}>
        Add credits
      </button>
      <ErrorMessage error={error} />
    </form>
  );
}

const spec: ResourceSpec<Organization> = {
  title: 'Organizations',
  singular: 'organization',
  path: '/api/v1/admin/organizations',
  listKey: 'organizations',
  itemKey: 'organization',
  empty: 'No organizations yet.',
  canWrite: () => true,
  deleteLabel: 'Deactivate',
  canDelete: (o) => o.active,
  intro: (
    <p class="muted">
      Creating an organization creates its first admin user and an organization key, shown once. Deactivating
      keeps its data and stops its keys.
    </p>
  ),
  columns: [
    { label: 'Name', render: (o) => o.name },
    { label: 'Status', render: (o) => (o.active ? 'active' : 'deactivated') },
    { label: 'Credits', render: (o) => o.credit_balance.toLocaleString() },
    { label: 'Created', render: (o) => formatDate(o.created_at) },
  ],
  fields: [
    { name: 'name', label: 'Name', kind: 'text', required: true },
    { name: 'email', label: 'First admin user email', kind: 'email', required: true, createOnly: true },
  ],
  toBody: (v, editing) =>
    editing ? { name: v.name } : { organization: { name: v.name }, user: { email: v.email } },
  afterCreate: (response) => (
    <SecretOnce label={`Organization key of ${response.organization?.name}`} value={response.key} />
  ),
  rowActions: (o, reload) => (o.active ? <AddCredits org={o} reload={reload} /> : null),
};

export function OrganizationsPage() {
  return <ResourcePage spec={spec} />;
}
