import { nameOf, namesOf, ResourcePage, type ResourceSpec } from '../crud';

interface Agent {
  id: number;
  name: string;
  instructions: string;
  model_configuration_id: number | null;
  skill_ids: number[];
  group_ids: number[];
  tools: string[];
}

const TOOLS = ['knowledge', 'artifacts', 'skills', 'integrations'];

const spec: ResourceSpec<Agent> = {
  title: 'Agents',
  singular: 'agent',
  path: '/api/v1/agents',
  listKey: 'agents',
  itemKey: 'agent',
  empty: 'No agents yet.',
  refs: {
    models: ['/api/v1/model_configurations', 'model_configurations'],
    skills: ['/api/v1/skills', 'skills'],
    groups: ['/api/v1/groups', 'groups'],
  },
  columns: [
    { label: 'Name', render: (a) => a.name },
    {
      label: 'Model',
      render: (a, refs) =>
        a.model_configuration_id ? nameOf(refs.models, a.model_configuration_id) : 'chat or default',
    },
    { label: 'Tools', render: (a) => (a.tools.length ? a.tools.join(', ') : 'none') },
    { label: 'Skills', render: (a, refs) => namesOf(refs.skills, a.skill_ids) },
    {
      label: 'Groups',
      render: (a, refs) => (a.group_ids.length ? namesOf(refs.groups, a.group_ids) : 'everyone'),
    },
  ],
  fields: [
    { name: 'name', label: 'Name', kind: 'text', required: true },
    { name: 'instructions', label: 'Instructions', kind: 'textarea', required: true, rows: 6 },
    {
      name: 'model_configuration_id',
      label: 'Pinned model',
      kind: 'select',
      nullable: true,
      options: (refs) =>
        (refs.models ?? []).filter((m) => m.purpose === 'chat').map((m) => ({ id: m.id, label: m.name })),
    },
    {
      name: 'tools',
      label: 'Tool families',
      kind: 'ids',
      initial: TOOLS,
      options: () => TOOLS.map((t) => ({ id: t, label: t })),
    },
    {
      name: 'skill_ids',
      label: 'Skills (slash commands)',
      kind: 'ids',
      options: (refs) =>
        (refs.skills ?? []).map((s) => ({ id: s.id, label: `${s.name} (${s.slash_command})` })),
    },
    {
      name: 'group_ids',
      label: 'Groups allowed (none picked: everyone)',
      kind: 'ids',
      options: (refs) => (refs.groups ?? []).map((g) => ({ id: g.id, label: g.name })),
    },
  ],
  fromItem: (a) => a,
  toBody: (v, editing) => {
    const body: Record<string, unknown> = {
      name: v.name,
      instructions: v.instructions,
      tools: v.tools,
      skill_ids: v.skill_ids,
      group_ids: v.group_ids,
    };
    if (v.model_configuration_id) body.model_configuration_id = Number(v.model_configuration_id);
    else if (editing) body.model_configuration_id = null;
    return body;
  },
};

export function AgentsPage() {
  return <ResourcePage spec={spec} />;
}
