import { get } from '../api';
import { namesOf, ResourcePage, type ResourceSpec } from '../crud';
import { States, useLoad } from '../ui';

interface Integration {
  id: number;
  name: string;
  slug: string;
  url: string;
  header_names: string[];
  all_projects: boolean;
  project_ids: number[];
  enabled: boolean;
}

function Tools({ integration }: { integration: Integration }) {
  const tools = useLoad(
    (signal) => get(`/api/v1/integrations/${integration.id}/tools`, undefined, signal),
    [integration.id],
  );
  return (
    <div class="stack">
      <h3>Tools of {integration.name}</h3>
      <States loaded={tools} empty="The server lists no tools." isEmpty={(d: any) => d.tools.length === 0}>
        {(d: any) => (
          <ul class="plain tools">
            {d.tools.map((t: any) => (
              <li key={t.name}>
                <code>{t.model_name}</code> — {t.description || <span class="muted">no description</span>}
              </li>
            ))}
          </ul>
        )}
      </States>
    </div>
  );
}

const spec: ResourceSpec<Integration> = {
  title: 'Integrations',
  singular: 'integration',
  path: '/api/v1/integrations',
  listKey: 'integrations',
  itemKey: 'integration',
  empty: 'No tool servers connected yet.',
  intro: (
    <p class="muted">
      MCP tool servers (Streamable HTTP) whose tools chats and artifact generation may call. Header values are
      write-only. Open an integration to list its tools.
    </p>
  ),
  refs: { projects: ['/api/v1/projects', 'projects'] },
  columns: [
    { label: 'Name', render: (i) => i.name },
    { label: 'URL', render: (i) => <code class="break">{i.url}</code> },
    { label: 'Enabled', render: (i) => (i.enabled ? 'yes' : 'no') },
    {
      label: 'Projects',
      render: (i, refs) => (i.all_projects ? 'all' : namesOf(refs.projects, i.project_ids)),
    },
    { label: 'Headers', render: (i) => (i.header_names.length ? i.header_names.join(', ') : '—') },
  ],
  fields: [
    { name: 'name', label: 'Name', kind: 'text', required: true },
    { name: 'url', label: 'MCP endpoint URL', kind: 'url', required: true },
    {
      name: 'headers',
      label: 'Headers (JSON object, write-only)',
      kind: 'textarea',
      writeOnly: true,
      rows: 3,
      hint: 'e.g. {"Authorization": "Bearer …"}; empty keeps the stored headers',
    },
    {
      name: 'project_ids',
      label: 'Projects (none picked: every project)',
      kind: 'ids',
      options: (refs) => (refs.projects ?? []).map((p) => ({ id: p.id, label: p.name })),
    },
    { name: 'enabled', label: 'Enabled', kind: 'checkbox' },
  ],
  fromItem: (i) => ({ ...i, headers: '' }),
  toBody: (v) => {
    const body: Record<string, unknown> = {
      name: v.name,
      url: v.url,
      project_ids: v.project_ids,
      enabled: Boolean(v.enabled),
    };
    if (v.headers?.trim()) {
      try {
        body.headers = JSON.parse(v.headers);
      } catch {
        throw new Error('Headers must be a JSON object, e.g. {"Authorization": "Bearer …"}');
      }
    }
    return body;
  },
  detail: (i) => <Tools integration={i} />,
};

export function IntegrationsPage() {
  return <ResourcePage spec={spec} />;
}
