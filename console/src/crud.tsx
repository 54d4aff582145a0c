/**
 * One page shape for the management resources that are a list plus a form: which fields, which
 * columns, which other lists feed the pickers. Pages with more to them compose these pieces.
 */
import { type ComponentChildren, Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { api, get } from './api';
import { isAdmin } from './session';
import {
  CheckList,
  ConfirmButton,
  ErrorMessage,
  Field,
  type Loaded,
  PageHeader,
  Pager,
  type PaginationInfo,
  States,
  useAction,
  useLoad,
} from './ui';

export interface Option {
  id: number | string;
  label: string;
}

export type Refs = Record<string, any[]>;

export interface FieldSpec {
  name: string;
  label: string;
  kind: 'text' | 'textarea' | 'number' | 'checkbox' | 'select' | 'ids' | 'password' | 'email' | 'url';
  required?: boolean;
  hint?: string;
  options?: (refs: Refs) => Option[];
  /** Not sent on update (the API fixes it at creation). */
  createOnly?: boolean;
  /** Sent when filled in, never read back (secrets). */
  writeOnly?: boolean;
  /** Select without a choice sends null (nullable ids) instead of leaving the field out. */
  nullable?: boolean;
  rows?: number;
  /** Value of a new item's field. */
  initial?: unknown;
}

export interface Column<T> {
  label: string;
  render: (item: T, refs: Refs) => ComponentChildren;
}

export interface ResourceSpec<T extends { id: number }> {
  title: string;
  singular: string;
  path: string;
  listKey: string;
  itemKey: string;
  columns: Column<T>[];
  fields: FieldSpec[];
  /** Other lists the pickers and columns need: name -> [path, key]. */
  refs?: Record<string, [string, string]>;
  empty: string;
  intro?: ComponentChildren;
  toBody?: (values: Record<string, any>, editing: T | null) => Record<string, any>;
  fromItem?: (item: T) => Record<string, any>;
  /** Extra row buttons (archive, members...). */
  rowActions?: (item: T, reload: () => void, refs: Refs) => ComponentChildren;
  /** Shown under a row when it is opened. */
  detail?: (item: T, reload: () => void, refs: Refs) => ComponentChildren;
  /** Below the form after a create (a secret shown once). */
  afterCreate?: (response: any) => ComponentChildren;
  query?: Record<string, string | number | boolean>;
  canWrite?: () => boolean;
  canDelete?: (item: T) => boolean;
  /** false when the API has no update (API keys). */
  editable?: boolean;
  deleteLabel?: string;
  /** 2 when the list is a section of a page with its own title. */
  level?: 1 | 2;
  /** A form of its own instead of the generic one. */
  form?: (props: CustomFormProps<T>) => ComponentChildren;
}

export interface CustomFormProps<T> {
  item: T | null;
  refs: Refs;
  onSubmit: (body: Record<string, any>) => Promise<unknown>;
  onCancel: () => void;
}

/** Loads every list a page's pickers need; a list the key may not read is empty. */
export function useRefs(refs: Record<string, [string, string]> | undefined): Loaded<Refs> {
  return useLoad(async (signal) => {
    const entries = await Promise.all(
      Object.entries(refs ?? {}).map(async ([name, [path, key]]) => {
        try {
          const body = await get(path, { page_size: 100 }, signal);
          return [name, body[key] ?? []] as const;
        } catch {
          return [name, []] as const;
        }
      }),
    );
    return Object.fromEntries(entries) as Refs;
  }, []);
}

export const nameOf = (list: any[] | undefined, id: number | null | undefined, field = 'name') =>
  id === null || id === undefined ? '—' : (list?.find((x) => x.id === id)?.[field] ?? `#${id}`);

export const namesOf = (list: any[] | undefined, ids: number[] | undefined, field = 'name') =>
  ids && ids.length > 0 ? ids.map((id) => nameOf(list, id, field)).join(', ') : '—';

function initialValues(fields: FieldSpec[], item: Record<string, any> | null): Record<string, any> {
  const values: Record<string, any> = {};
  for (const field of fields) {
    const current = item ? item[field.name] : field.initial;
    if (field.writeOnly) values[field.name] = '';
    else if (field.kind === 'ids') values[field.name] = current ?? [];
    else if (field.kind === 'checkbox') values[field.name] = current ?? false;
    else values[field.name] = current ?? '';
  }
  return values;
}

function bodyOf(fields: FieldSpec[], values: Record<string, any>, editing: boolean): Record<string, any> {
  const body: Record<string, any> = {};
  for (const field of fields) {
    if (editing && field.createOnly) continue;
    const value = values[field.name];
    if (field.kind === 'number') {
      if (value !== '' && value !== undefined) body[field.name] = Number(value);
    } else if (field.kind === 'select') {
      if (value === '' || value === undefined) {
        if (field.nullable && editing) body[field.name] = null;
      } else body[field.name] = Number.isNaN(Number(value)) ? value : Number(value);
    } else if (field.writeOnly) {
      if (value) body[field.name] = value;
    } else if (
      field.kind === 'text' ||
      field.kind === 'textarea' ||
      field.kind === 'email' ||
      field.kind === 'url'
    ) {
      if (value !== '' || editing) body[field.name] = value;
    } else body[field.name] = value;
  }
  return body;
}

export function ResourceForm({
  fields,
  refs,
  initial,
  submitLabel,
  onSubmit,
  onCancel,
}: {
  fields: FieldSpec[];
  refs: Refs;
  initial: Record<string, any>;
  submitLabel: string;
  onSubmit: (values: Record<string, any>) => Promise<unknown>;
  onCancel?: () => void;
}) {
  const [values, setValues] = useState(initial);
  const { busy, error, run } = useAction();
  const set = (name: string, value: unknown) => setValues((v) => ({ ...v, [name]: value }));
  return (
    <form
      class="card form"
      onSubmit={(e) => {
        e.preventDefault();
        void run(() => onSubmit(values));
      }}
    >
      {fields.map((field) => {
        const value = values[field.name];
        if (field.kind === 'ids') {
          return (
            <CheckList
              key={field.name}
              legend={field.label}
              options={field.options?.(refs) ?? []}
              value={value ?? []}
              onChange={(next) => set(field.name, next)}
            />
          );
        }
        if (field.kind === 'checkbox') {
          return (
            <label key={field.name} class="check">
              <input
                type="checkbox"
                checked={Boolean(value)}
                onChange={(e) => set(field.name, e.currentTarget.checked)}
              />{' '}
              {field.label}
              {field.hint ? <small class="muted"> — {field.hint}</small> : null}
            </label>
          );
        }
        return (
          <Field
            key={field.name}
            label={field.label + (field.required ? ' (required)' : '')}
            hint={field.hint}
          >
            {(id) => {
              if (field.kind === 'textarea')
                return (
                  <textarea
                    id={id}
                    rows={field.rows ?? 4}
                    required={field.required}
                    value={value}
                    onInput={(e) => set(field.name, e.currentTarget.value)}
                  />
                );
              if (field.kind === 'select')
                return (
                  <select
                    id={id}
                    value={String(value ?? '')}
                    onChange={(e) => set(field.name, e.currentTarget.value)}
                  >
                    <option value="">{field.required ? 'Choose…' : '(none)'}</option>
                    {(field.options?.(refs) ?? []).map((o) => (
                      <option key={o.id} value={String(o.id)}>
                        {o.label}
                      </option>
                    ))}
                  </select>
                );
              return (
                <input
                  id={id}
                  type={
                    field.kind === 'password' ? 'password' : field.kind === 'number' ? 'number' : field.kind
                  }
                  step={field.kind === 'number' ? 'any' : undefined}
                  required={field.required}
                  autoComplete={field.kind === 'password' ? 'new-password' : 'off'}
                  value={value}
                  onInput={(e) => set(field.name, e.currentTarget.value)}
                />
              );
            }}
          </Field>
        );
      })}
      <ErrorMessage error={error} />
      <div class="row">
        <button type="submit" disabled={busy}>
          {busy ? 'Saving…' : submitLabel}
        </button>
        {onCancel ? (
          <button type="button" class="secondary" onClick={onCancel}>
            Cancel
          </button>
        ) : null}
      </div>
    </form>
  );
}

function Header({ title, level, children }: { title: string; level: 1 | 2; children: ComponentChildren }) {
  if (level === 1) return <PageHeader title={title}>{children}</PageHeader>;
  return (
    <header class="page-header">
      <h2>{title}</h2>
      <div class="actions">{children}</div>
    </header>
  );
}

export function ResourcePage<T extends { id: number }>({ spec }: { spec: ResourceSpec<T> }) {
  const [page, setPage] = useState(1);
  const list = useLoad(
    (signal) => get(spec.path, { page, page_size: 50, ...spec.query }, signal),
    [page, spec.path, JSON.stringify(spec.query ?? {})],
  );
  const refs = useRefs(spec.refs);
  const [editing, setEditing] = useState<T | 'new' | null>(null);
  const [created, setCreated] = useState<any>(null);
  const [open, setOpen] = useState<number | null>(null);
  const writable = (spec.canWrite ?? isAdmin)();
  const refData = refs.data ?? {};
  const items: T[] = list.data?.[spec.listKey] ?? [];
  const pagination: PaginationInfo | undefined = list.data?.pagination;

  const save = async (values: Record<string, any>, prepared = false) => {
    const target = editing === 'new' ? null : editing;
    const body = prepared
      ? values
      : spec.toBody
        ? spec.toBody(values, target)
        : bodyOf(spec.fields, values, target !== null);
    if (target) await api('PUT', `${spec.path}/${target.id}`, { body });
    else {
      const response = await api('POST', spec.path, { body });
      if (spec.afterCreate) setCreated(response);
    }
    setEditing(null);
    list.reload();
    refs.reload();
  };

  return (
    <section aria-label={spec.title}>
      <Header title={spec.title} level={spec.level ?? 1}>
        {writable ? (
          <button
            type="button"
            onClick={() => {
              setCreated(null);
              // The pickers show what exists now (another section may have added to it).
              refs.reload();
              setEditing('new');
            }}
          >
            New {spec.singular}
          </button>
        ) : (
          <span class="muted">Read only for this key</span>
        )}
      </Header>
      {spec.intro}
      {created && spec.afterCreate ? spec.afterCreate(created) : null}
      {editing && spec.form ? (
        <div key={editing === 'new' ? 'new' : editing.id}>
          {spec.form({
            item: editing === 'new' ? null : editing,
            refs: refData,
            onSubmit: (body) => save(body, true),
            onCancel: () => setEditing(null),
          })}
        </div>
      ) : null}
      {editing && !spec.form ? (
        <ResourceForm
          key={editing === 'new' ? 'new' : editing.id}
          fields={editing === 'new' ? spec.fields : spec.fields.filter((f) => !f.createOnly)}
          refs={refData}
          initial={initialValues(
            spec.fields,
            editing === 'new' ? null : spec.fromItem ? spec.fromItem(editing) : (editing as any),
          )}
          submitLabel={editing === 'new' ? `Create ${spec.singular}` : 'Save changes'}
          onSubmit={save}
          onCancel={() => setEditing(null)}
        />
      ) : null}
      <States loaded={list} empty={spec.empty} isEmpty={() => items.length === 0}>
        {() => (
          <>
            <table class="table">
              <thead>
                <tr>
                  {spec.columns.map((c) => (
                    <th key={c.label} scope="col">
                      {c.label}
                    </th>
                  ))}
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {items.map((item) => (
                  <Fragment key={item.id}>
                    <tr>
                      {spec.columns.map((c) => (
                        <td key={c.label} data-label={c.label}>
                          {c.render(item, refData)}
                        </td>
                      ))}
                      <td class="row-actions">
                        {spec.detail ? (
                          <button
                            type="button"
                            class="secondary"
                            aria-expanded={open === item.id}
                            onClick={() => setOpen(open === item.id ? null : item.id)}
                          >
                            {open === item.id ? 'Close' : 'Open'}
                          </button>
                        ) : null}
                        {writable && spec.editable !== false ? (
                          <button
                            type="button"
                            class="secondary"
                            onClick={() => {
                              refs.reload();
                              setEditing(item);
                            }}
                          >
                            Edit
                          </button>
                        ) : null}
                        {spec.rowActions?.(item, list.reload, refData)}
                        {writable && (spec.canDelete?.(item) ?? true) ? (
                          <ConfirmButton
                            label={spec.deleteLabel ?? 'Delete'}
                            onConfirm={async () => {
                              await api('DELETE', `${spec.path}/${item.id}`);
                              list.reload();
                            }}
                          />
                        ) : null}
                      </td>
                    </tr>
                    {spec.detail && open === item.id ? (
                      <tr class="detail-row">
                        <td colSpan={spec.columns.length + 1}>{spec.detail(item, list.reload, refData)}</td>
                      </tr>
                    ) : null}
                  </Fragment>
                ))}
              </tbody>
            </table>
            <Pager pagination={pagination} onPage={setPage} />
          </>
        )}
      </States>
    </section>
  );
}
