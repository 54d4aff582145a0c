import { useEffect, useState } from 'preact/hooks';
import { api, get } from '../api';
import { namesOf, ResourcePage, type ResourceSpec } from '../crud';
import { isAdmin } from '../session';
import {
  CheckList,
  ConfirmButton,
  ErrorMessage,
  Field,
  formatDate,
  SecretOnce,
  States,
  StatusBadge,
  useAction,
  useLoad,
} from '../ui';

interface Project {
  id: number;
  name: string;
  overview: string;
  group_ids: number[];
  category_ids: number[];
  archived: boolean;
}

interface Webhook {
  id: number;
  url: string;
  events: string[];
  created_at: string;
}

interface Delivery {
  id: number;
  event_name: string;
  status: 'pending' | 'delivered' | 'failed';
  attempt_count: number;
  last_status_code: number | null;
  last_error: string | null;
  next_attempt_at: string | null;
  created_at: string;
}

export const WEBHOOK_EVENTS = ['artifact_generated', 'artifact_refined', 'artifact_generation_failed'];

function Deliveries({ project, webhook }: { project: Project; webhook: Webhook }) {
  const base = `/api/v1/projects/${project.id}/webhooks/${webhook.id}`;
  const log = useLoad((signal) => get(`${base}/deliveries`, { page_size: 20 }, signal), [base]);
  const { error, run } = useAction();
  const pending = (log.data?.deliveries ?? []).some((d: Delivery) => d.status === 'pending');
  // Pending deliveries change in the background (retries): follow them until they settle.
  useEffect(() => {
    if (!pending) return;
    const timer = setInterval(log.reload, 3000);
    return () => clearInterval(timer);
  }, [pending, log.reload]);
  return (
    <div class="stack">
      <div class="row">
        <h4>Delivery log</h4>
        <button type="button" class="secondary" onClick={log.reload}>
          Refresh
        </button>
        {isAdmin() ? (
          <button
            type="button"
            class="secondary"
            onClick={() =>
              void run(async () => {
                await api('POST', `${base}/test`);
                log.reload();
              })
            }
          >
            Send test event
          </button>
        ) : null}
      </div>
      <ErrorMessage error={error} />
      <States loaded={log} empty="No deliveries yet." isEmpty={(d: any) => d.deliveries.length === 0}>
        {(d: any) => (
          <table class="table compact" aria-label={`Deliveries to ${webhook.url}`}>
            <thead>
              <tr>
                <th scope="col">Event</th>
                <th scope="col">Status</th>
                <th scope="col">Attempts</th>
                <th scope="col">Response</th>
                <th scope="col">Created</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {d.deliveries.map((delivery: Delivery) => (
                <tr key={delivery.id} data-testid="delivery">
                  <td data-label="Event">{delivery.event_name}</td>
                  <td data-label="Status">
                    <StatusBadge status={delivery.status} />
                    {delivery.status === 'pending' && delivery.next_attempt_at ? (
                      <small class="muted"> next {formatDate(delivery.next_attempt_at)}</small>
                    ) : null}
                  </td>
                  <td data-label="Attempts">{delivery.attempt_count}</td>
                  <td data-label="Response">
                    {delivery.last_status_code ?? '—'}
                    {delivery.last_error ? <small class="error-text"> {delivery.last_error}</small> : null}
                  </td>
                  <td data-label="Created">{formatDate(delivery.created_at)}</td>
                  <td class="row-actions">
                    {isAdmin() ? (
                      <button
                        type="button"
                        class="secondary"
                        onClick={() =>
                          void run(async () => {
                            await api('POST', `${base}/deliveries/${delivery.id}/redeliver`);
                            log.reload();
                          })
                        }
                      >
                        Redeliver
                      </button>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </States>
    </div>
  );
}

export function WebhooksSection({ project }: { project: Project }) {
  const path = `/api/v1/projects/${project.id}/webhooks`;
  const list = useLoad((signal) => get(path, { page_size: 100 }, signal), [path]);
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<(string | number)[]>([...WEBHOOK_EVENTS]);
  const [secret, setSecret] = useState<string | null>(null);
  const [open, setOpen] = useState<number | null>(null);
  const { busy, error, run } = useAction();
  return (
    <section class="stack webhooks" aria-label={`Webhooks of ${project.name}`}>
      <h3>Webhooks</h3>
      {secret ? (
        <SecretOnce label="Webhook signing secret" value={secret} onDone={() => setSecret(null)} />
      ) : null}
      <States
        loaded={list}
        empty="No webhooks for this project."
        isEmpty={(d: any) => d.webhooks.length === 0}
      >
        {(d: any) => (
          <ul class="plain">
            {d.webhooks.map((w: Webhook) => (
              <li key={w.id} class="card">
                <div class="row">
                  <code class="break">{w.url}</code>
                  <span class="muted">{w.events.join(', ')}</span>
                  <button
                    type="button"
                    class="secondary"
                    aria-expanded={open === w.id}
                    onClick={() => setOpen(open === w.id ? null : w.id)}
                  >
                    {open === w.id ? 'Hide deliveries' : 'Deliveries'}
                  </button>
                  {isAdmin() ? (
                    <ConfirmButton
                      label="Delete webhook"
                      onConfirm={async () => {
                        await api('DELETE', `${path}/${w.id}`);
                        list.reload();
                      }}
                    />
                  ) : null}
                </div>
                {open === w.id ? <Deliveries project={project} webhook={w} /> : null}
              </li>
            ))}
          </ul>
        )}
      </States>
      {isAdmin() && !project.archived ? (
        <form
          class="form"
          onSubmit={(e) => {
            e.preventDefault();
            void run(async () => {
              const body = await api('POST', path, { body: { url, events } });
              setSecret(body.webhook.secret);
              setUrl('');
              setOpen(body.webhook.id);
              list.reload();
            });
          }}
        >
          <h4>Add a webhook</h4>
          <Field
            label="Endpoint URL"
            hint="https on a public address (http and local addresses only when the operator allows them)"
          >
            {(id) => (
              <input id={id} type="url" required value={url} onInput={(e) => setUrl(e.currentTarget.value)} />
            )}
          </Field>
          <CheckList
            legend="Events"
            options={WEBHOOK_EVENTS.map((e) => ({ id: e, label: e }))}
            value={events}
            onChange={setEvents}
          />
          <ErrorMessage error={error} />
          <button type="submit" disabled={busy || events.length === 0}>
            Add webhook
          </button>
        </form>
      ) : null}
    </section>
  );
}

function ProjectDetail({ project }: { project: Project }) {
  return (
    <div class="stack">
      {project.overview ? <p>{project.overview}</p> : null}
      <WebhooksSection project={project} />
    </div>
  );
}

function spec(includeArchived: boolean, setIncludeArchived: (value: boolean) => void): ResourceSpec<Project> {
  return {
    intro: (
      <label class="check filter">
        <input
          type="checkbox"
          checked={includeArchived}
          onChange={(e) => setIncludeArchived(e.currentTarget.checked)}
        />{' '}
        Show archived projects
      </label>
    ),
    title: 'Projects',
    singular: 'project',
    path: '/api/v1/projects',
    listKey: 'projects',
    itemKey: 'project',
    query: { include_archived: includeArchived },
    empty: 'No projects yet.',
    refs: {
      groups: ['/api/v1/groups', 'groups'],
      categories: ['/api/v1/categories', 'categories'],
    },
    columns: [
      {
        label: 'Name',
        render: (p) => (
          <>
            {p.name} {p.archived ? <span class="badge">archived</span> : null}
          </>
        ),
      },
      { label: 'Groups', render: (p, refs) => namesOf(refs.groups, p.group_ids) },
      { label: 'Categories', render: (p, refs) => namesOf(refs.categories, p.category_ids) },
    ],
    fields: [
      { name: 'name', label: 'Name', kind: 'text', required: true },
      { name: 'overview', label: 'Overview', kind: 'textarea' },
      {
        name: 'group_ids',
        label: 'Groups (none picked: the default group)',
        kind: 'ids',
        options: (refs) => (refs.groups ?? []).map((g) => ({ id: g.id, label: g.name })),
      },
      {
        name: 'category_ids',
        label: 'Categories',
        kind: 'ids',
        options: (refs) => (refs.categories ?? []).map((c) => ({ id: c.id, label: c.name })),
      },
    ],
    toBody: (v, editing) => {
      const body: Record<string, unknown> = {
        name: v.name,
        overview: v.overview,
        category_ids: v.category_ids,
      };
      if (v.group_ids.length > 0) body.group_ids = v.group_ids;
      else if (!editing) body.use_default_group = true;
      return body;
    },
    rowActions: (p, reload) =>
      isAdmin() && !p.archived ? (
        <ConfirmButton
          label="Archive"
          onConfirm={async () => {
            await api('POST', `/api/v1/projects/${p.id}/archive`);
            reload();
          }}
        />
      ) : null,
    detail: (p) => <ProjectDetail project={p} />,
  };
}

export function ProjectsPage() {
  const [includeArchived, setIncludeArchived] = useState(false);
  return <ResourcePage spec={spec(includeArchived, setIncludeArchived)} />;
}
