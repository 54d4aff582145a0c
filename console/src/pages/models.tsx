import { api } from '../api';
import { ResourcePage, type ResourceSpec } from '../crud';
import { isAdmin } from '../session';
import { ConfirmButton } from '../ui';

interface ModelConfiguration {
  id: number;
  name: string;
  provider: string;
  model: string;
  base_url: string | null;
  purpose: string;
  is_default: boolean;
  has_api_key: boolean;
  credits_per_1k_input_tokens: number;
  credits_per_1k_output_tokens: number;
}

const spec: ResourceSpec<ModelConfiguration> = {
  title: 'Model configurations',
  singular: 'model configuration',
  path: '/api/v1/model_configurations',
  listKey: 'model_configurations',
  itemKey: 'model_configuration',
  empty: 'No model configurations yet.',
  intro: (
    <p class="muted">
      Provider API keys are write-only: stored encrypted and never shown again. Leave the key field empty when
      editing to keep the stored one.
    </p>
  ),
  columns: [
    {
      label: 'Name',
      render: (m) => (
        <>
          {m.name} {m.is_default ? <span class="badge badge-default">default</span> : null}
        </>
      ),
    },
    { label: 'Provider', render: (m) => m.provider },
    { label: 'Model', render: (m) => <code>{m.model}</code> },
    { label: 'Purpose', render: (m) => m.purpose },
    { label: 'API key', render: (m) => (m.has_api_key ? 'stored' : 'none') },
    {
      label: 'Credits / 1k in · out',
      render: (m) => `${m.credits_per_1k_input_tokens} · ${m.credits_per_1k_output_tokens}`,
    },
  ],
  fields: [
    { name: 'name', label: 'Name', kind: 'text', required: true },
    {
      name: 'provider',
      label: 'Provider',
      kind: 'select',
      required: true,
      options: () =>
        ['openai-compatible', 'openai', 'anthropic', 'builtin'].map((p) => ({ id: p, label: p })),
    },
    { name: 'model', label: 'Model', kind: 'text', hint: 'The provider model id; optional for builtin' },
    {
      name: 'base_url',
      label: 'Base URL',
      kind: 'url',
      hint: 'Required for openai-compatible, e.g. http://127.0.0.1:1234/v1',
    },
    { name: 'api_key', label: 'Provider API key', kind: 'password', writeOnly: true, hint: 'Write-only' },
    {
      name: 'purpose',
      label: 'Purpose',
      kind: 'select',
      options: () => ['chat', 'embedding'].map((p) => ({ id: p, label: p })),
    },
    { name: 'is_default', label: 'Default model of the organization', kind: 'checkbox' },
    { name: 'credits_per_1k_input_tokens', label: 'Credits per 1k input tokens', kind: 'number' },
    { name: 'credits_per_1k_output_tokens', label: 'Credits per 1k output tokens', kind: 'number' },
  ],
  toBody: (v, editing) => {
    const body: Record<string, unknown> = {
      name: v.name,
      provider: v.provider,
      is_default: Boolean(v.is_default),
    };
    if (v.model) body.model = v.model;
    if (v.base_url) body.base_url = v.base_url;
    else if (editing) body.base_url = null;
    if (v.api_key) body.api_key = v.api_key;
    if (v.purpose) body.purpose = v.purpose;
    for (const name of ['credits_per_1k_input_tokens', 'credits_per_1k_output_tokens']) {
      if (v[name] !== '' && v[name] !== undefined) body[name] = Number(v[name]);
    }
    return body;
  },
  rowActions: (m, reload) =>
    isAdmin() ? (
      <>
        {!m.is_default && m.purpose === 'chat' ? (
          <button
            type="button"
            class="secondary"
            onClick={async () => {
              await api('PUT', `/api/v1/model_configurations/${m.id}`, { body: { is_default: true } });
              reload();
            }}
          >
            Make default
          </button>
        ) : null}
        {m.has_api_key ? (
          <ConfirmButton
            label="Remove key"
            onConfirm={async () => {
              await api('PUT', `/api/v1/model_configurations/${m.id}`, { body: { api_key: null } });
              reload();
            }}
          />
        ) : null}
      </>
    ) : null,
};

export function ModelsPage() {
  return <ResourcePage spec={spec} />;
}
