import { useState } from 'preact/hooks';
import { get } from '../api';
import { type CustomFormProps, namesOf, ResourcePage, type ResourceSpec } from '../crud';
import { CheckList, ErrorMessage, Field, PageHeader, States, useAction, useLoad } from '../ui';

interface ArtifactType {
  id: number;
  slug: string;
  name: string;
  description: string;
  category_id: number | null;
}

interface Variable {
  name: string;
  description: string;
  type: string;
}

interface Skill {
  id: number;
  name: string;
  content: string;
  description: string;
  custom_variables: Variable[];
  slash_command: string;
  artifact_type_ids: number[];
}

/** The placeholder grammar the service fills in at generation: `{custom.<name>}`. */
export function placeholdersOf(content: string): string[] {
  return [...new Set([...content.matchAll(/\{custom\.([^{}\s]+)\}/g)].map((m) => m[1]))];
}

function SkillsOfType({ type }: { type: ArtifactType }) {
  const skills = useLoad(
    (signal) => get(`/api/v1/artifact_types/${type.slug}/skills`, { page_size: 100 }, signal),
    [type.slug],
  );
  return (
    <div class="stack">
      <h3>
        Skills of {type.name} <code>{type.slug}</code>
      </h3>
      <States
        loaded={skills}
        empty="No skill writes this type yet."
        isEmpty={(d: any) => d.skills.length === 0}
      >
        {(d: any) => (
          <ul class="plain">
            {d.skills.map((s: Skill) => (
              <li key={s.id}>
                {s.name} <code>{s.slash_command}</code>
                {s.custom_variables.length
                  ? ` — variables: ${s.custom_variables.map((v) => v.name).join(', ')}`
                  : ''}
              </li>
            ))}
          </ul>
        )}
      </States>
    </div>
  );
}

const typeSpec: ResourceSpec<ArtifactType> = {
  title: 'Artifact types',
  singular: 'artifact type',
  path: '/api/v1/artifact_types',
  listKey: 'artifact_types',
  itemKey: 'artifact_type',
  level: 2,
  empty: 'No artifact types yet.',
  columns: [
    { label: 'Name', render: (t) => t.name },
    { label: 'Slug', render: (t) => <code>{t.slug}</code> },
    { label: 'Description', render: (t) => t.description || '—' },
  ],
  fields: [
    { name: 'name', label: 'Name (at most 100 characters)', kind: 'text', required: true },
    { name: 'description', label: 'Description', kind: 'textarea' },
  ],
  detail: (t) => <SkillsOfType type={t} />,
};

/** The skill editor: the variables come from the `{custom.<name>}` placeholders it finds. */
export function SkillForm({ item, refs, onSubmit, onCancel }: CustomFormProps<Skill>) {
  const [name, setName] = useState(item?.name ?? '');
  const [description, setDescription] = useState(item?.description ?? '');
  const [content, setContent] = useState(item?.content ?? '');
  const [typeIds, setTypeIds] = useState<(number | string)[]>(item?.artifact_type_ids ?? []);
  const [notes, setNotes] = useState<Record<string, string>>(
    Object.fromEntries((item?.custom_variables ?? []).map((v) => [v.name, v.description])),
  );
  const { busy, error, run } = useAction();
  const found = placeholdersOf(content);
  const types: ArtifactType[] = refs.types ?? [];
  return (
    <form
      class="card form"
      onSubmit={(e) => {
        e.preventDefault();
        void run(() =>
          onSubmit({
            name,
            description,
            content,
            artifact_type_ids: typeIds,
            custom_variables: found.map((v) => ({
              name: v,
              description: notes[v] ?? '',
              type: item?.custom_variables.find((c) => c.name === v)?.type ?? 'text',
            })),
          }),
        );
      }}
    >
      <Field label="Name (required)">
        {(id) => <input id={id} required value={name} onInput={(e) => setName(e.currentTarget.value)} />}
      </Field>
      <Field label="Description">
        {(id) => <input id={id} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />}
      </Field>
      <Field
        label="Prompt (required)"
        hint="Use {custom.<name>} for a value the caller supplies, e.g. {custom.topic}."
      >
        {(id) => (
          <textarea
            id={id}
            rows={8}
            required
            class="mono"
            value={content}
            onInput={(e) => setContent(e.currentTarget.value)}
          />
        )}
      </Field>
      <div class="variables" aria-live="polite">
        <h3>Variables found</h3>
        {found.length === 0 ? (
          <p class="muted">No {'{custom.<name>}'} placeholders in the prompt.</p>
        ) : (
          <ul class="plain">
            {found.map((v) => (
              <li key={v} class="row">
                <code>{`{custom.${v}}`}</code>
                <label class="sr-only" for={`var-${v}`}>
                  Description of {v}
                </label>
                <input
                  id={`var-${v}`}
                  placeholder="What the caller should supply"
                  value={notes[v] ?? ''}
                  onInput={(e) => setNotes({ ...notes, [v]: e.currentTarget.value })}
                />
              </li>
            ))}
          </ul>
        )}
      </div>
      <CheckList
        legend="Artifact types it writes (at least one)"
        options={types.map((t) => ({ id: t.id, label: t.name }))}
        value={typeIds}
        onChange={setTypeIds}
      />
      <ErrorMessage error={error} />
      <div class="row">
        <button type="submit" disabled={busy}>
          {item ? 'Save skill' : 'Create skill'}
        </button>
        <button type="button" class="secondary" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

const skillSpec: ResourceSpec<Skill> = {
  title: 'Skills',
  singular: 'skill',
  path: '/api/v1/skills',
  listKey: 'skills',
  itemKey: 'skill',
  level: 2,
  empty: 'No skills yet.',
  refs: { types: ['/api/v1/artifact_types', 'artifact_types'] },
  columns: [
    { label: 'Name', render: (s) => s.name },
    { label: 'Command', render: (s) => <code>{s.slash_command}</code> },
    {
      label: 'Variables',
      render: (s) => (s.custom_variables.length ? s.custom_variables.map((v) => v.name).join(', ') : '—'),
    },
    { label: 'Artifact types', render: (s, refs) => namesOf(refs.types, s.artifact_type_ids) },
  ],
  fields: [],
  form: (props) => <SkillForm {...props} />,
};

export function ArtifactTypesPage() {
  return (
    <>
      <PageHeader title="Artifact types & skills" />
      <ResourcePage spec={typeSpec} />
      <ResourcePage spec={skillSpec} />
    </>
  );
}
