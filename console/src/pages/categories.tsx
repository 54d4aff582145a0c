import { namesOf, ResourcePage, type ResourceSpec } from '../crud';

interface Category {
  id: number;
  name: string;
  description: string;
  group_ids: number[];
}

const spec: ResourceSpec<Category> = {
  title: 'Categories',
  singular: 'category',
  path: '/api/v1/categories',
  listKey: 'categories',
  itemKey: 'category',
  empty: 'No categories yet.',
  refs: { groups: ['/api/v1/groups', 'groups'] },
  columns: [
    { label: 'Name', render: (c) => c.name },
    { label: 'Description', render: (c) => c.description || '—' },
    { label: 'Groups', render: (c, refs) => namesOf(refs.groups, c.group_ids) },
  ],
  fields: [
    { name: 'name', label: 'Name', kind: 'text', required: true },
    { name: 'description', label: 'Description', kind: 'textarea' },
    {
      name: 'group_ids',
      label: 'Groups (at least one; none picked means the default group)',
      kind: 'ids',
      options: (refs) => (refs.groups ?? []).map((g) => ({ id: g.id, label: g.name })),
    },
  ],
  toBody: (v, editing) => {
    const body: Record<string, unknown> = { name: v.name, description: v.description };
    if (v.group_ids.length > 0) body.group_ids = v.group_ids;
    else if (!editing) body.use_default_group = true;
    return body;
  },
};

export function CategoriesPage() {
  return <ResourcePage spec={spec} />;
}
