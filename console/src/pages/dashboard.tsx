import { useState } from 'preact/hooks';
import { get } from '../api';
import { nameOf } from '../crud';
import { navigate } from '../router';
import { canRead, isAdmin } from '../session';
import { formatDate, PageHeader, States, StatusBadge, useLoad } from '../ui';

interface UsageRow {
  day?: string;
  project_id?: number | null;
  model_configuration_id?: number | null;
  input_tokens: number;
  output_tokens: number;
  credits: number;
  requests: number;
}

type Metric = 'credits' | 'tokens';
type Split = 'project' | 'model';

const DAYS = 30;
const PALETTE = ['#2563eb', '#d97706', '#059669', '#db2777', '#7c3aed', '#64748b'];
const MAX_SERIES = 5;

function lastDays(): string[] {
  const days: string[] = [];
  const today = new Date();
  for (let i = DAYS - 1; i >= 0; i--) {
    const d = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - i));
    days.push(d.toISOString().slice(0, 10));
  }
  return days;
}

const value = (row: UsageRow, metric: Metric) =>
  metric === 'credits' ? row.credits : row.input_tokens + row.output_tokens;

interface Series {
  label: string;
  perDay: Map<string, UsageRow>;
}

/** The busiest projects (or models) each get a series of days; the rest is one "other" series. */
async function loadSeries(split: Split, signal: AbortSignal) {
  const [groups, total, projects, models] = await Promise.all([
    get('/api/v1/usage', { group_by: split }, signal),
    get('/api/v1/usage', { group_by: 'day' }, signal),
    split === 'project' ? get('/api/v1/projects', { page_size: 100, include_archived: true }, signal) : null,
    split === 'model' ? get('/api/v1/model_configurations', { page_size: 100 }, signal) : null,
  ]);
  const field = split === 'project' ? 'project_id' : 'model_configuration_id';
  const names: any[] = projects?.projects ?? models?.model_configurations ?? [];
  const rows: UsageRow[] = [...groups.usage.rows].sort(
    (a, b) => b.credits - a.credits || b.requests - a.requests,
  );
  const top = rows.filter((r) => r[field] !== null && r[field] !== undefined).slice(0, MAX_SERIES);
  const series: Series[] = await Promise.all(
    top.map(async (row) => {
      const id = row[field] as number;
      const days = await get('/api/v1/usage', { group_by: 'day', [field]: id }, signal);
      return {
        label: nameOf(names, id),
        perDay: new Map((days.usage.rows as UsageRow[]).map((r) => [r.day!, r])),
      };
    }),
  );
  // What the named series do not cover (other projects, usage without a project...).
  const other = new Map<string, UsageRow>();
  for (const row of total.usage.rows as UsageRow[]) {
    const rest = { ...row };
    for (const s of series) {
      const part = s.perDay.get(row.day!);
      if (!part) continue;
      rest.credits -= part.credits;
      rest.input_tokens -= part.input_tokens;
      rest.output_tokens -= part.output_tokens;
      rest.requests -= part.requests;
    }
    if (rest.requests > 0 || rest.credits > 1e-9) other.set(row.day!, rest);
  }
  if (other.size > 0) series.push({ label: 'Other', perDay: other });
  return { series, usage: total.usage };
}

function Chart({ series, metric }: { series: Series[]; metric: Metric }) {
  const days = lastDays();
  const totals = days.map((day) =>
    series.reduce((sum, s) => sum + (s.perDay.get(day) ? value(s.perDay.get(day)!, metric) : 0), 0),
  );
  const max = Math.max(...totals, 0) || 1;
  const width = 600;
  const height = 200;
  const pad = { left: 44, bottom: 22, top: 8 };
  const barWidth = (width - pad.left) / days.length;
  const plot = height - pad.bottom - pad.top;
  const label = metric === 'credits' ? 'credits' : 'tokens';
  return (
    <figure class="chart">
      <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-labelledby="chart-title chart-desc">
        <title id="chart-title">Usage per day, last {DAYS} days</title>
        <desc id="chart-desc">Stacked bars of {label} per day; the table below lists the same figures.</desc>
        {[0, 0.5, 1].map((f) => (
          <g key={f}>
            <line
              x1={pad.left}
              x2={width}
              y1={pad.top + plot * (1 - f)}
              y2={pad.top + plot * (1 - f)}
              class="grid"
            />
            <text x={pad.left - 4} y={pad.top + plot * (1 - f) + 4} class="axis" text-anchor="end">
              {formatNumber(max * f)}
            </text>
          </g>
        ))}
        {days.map((day, i) => {
          let y = pad.top + plot;
          return (
            <g key={day}>
              {series.map((s, si) => {
                const row = s.perDay.get(day);
                if (!row) return null;
                const h = (value(row, metric) / max) * plot;
                y -= h;
                return (
                  <rect
                    key={s.label}
                    x={pad.left + i * barWidth + 1}
                    y={y}
                    width={Math.max(barWidth - 2, 1)}
                    height={h}
                    fill={PALETTE[si % PALETTE.length]}
                  >
                    <title>{`${day} · ${s.label}: ${formatNumber(value(row, metric))} ${label}`}</title>
                  </rect>
                );
              })}
              {i % 5 === 0 ? (
                <text x={pad.left + i * barWidth} y={height - 6} class="axis">
                  {day.slice(5)}
                </text>
              ) : null}
            </g>
          );
        })}
      </svg>
      <figcaption>
        <ul class="legend">
          {series.map((s, si) => (
            <li key={s.label}>
              <span class="swatch" data-color={si % PALETTE.length} aria-hidden="true" />
              {s.label}
            </li>
          ))}
        </ul>
      </figcaption>
      <details>
        <summary>Show as a table</summary>
        <table class="table compact">
          <thead>
            <tr>
              <th scope="col">Day</th>
              {series.map((s) => (
                <th key={s.label} scope="col">
                  {s.label}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {days
              .filter((_, i) => totals[i] > 0)
              .map((day) => (
                <tr key={day}>
                  <td data-label="Day">{day}</td>
                  {series.map((s) => (
                    <td key={s.label} data-label={s.label}>
                      {s.perDay.get(day) ? formatNumber(value(s.perDay.get(day)!, metric)) : '0'}
                    </td>
                  ))}
                </tr>
              ))}
          </tbody>
        </table>
      </details>
    </figure>
  );
}

function formatNumber(n: number): string {
  return n >= 100 ? Math.round(n).toLocaleString() : Number(n.toFixed(2)).toLocaleString();
}

function UsagePanel() {
  const [split, setSplit] = useState<Split>('project');
  const [chosen, setChosen] = useState<Metric | null>(null);
  const data = useLoad((signal) => loadSeries(split, signal), [split]);
  const usage = data.data?.usage;
  // Free models charge no credits: their usage is shown in tokens unless credits are asked for.
  const metric: Metric = chosen ?? (usage && usage.totals.credits === 0 ? 'tokens' : 'credits');
  return (
    <section class="card" aria-labelledby="usage-title">
      <div class="row spread">
        <h2 id="usage-title">Usage, last {DAYS} days</h2>
        <div class="row">
          <label for="usage-split">By</label>
          <select id="usage-split" value={split} onChange={(e) => setSplit(e.currentTarget.value as Split)}>
            <option value="project">project</option>
            <option value="model">model</option>
          </select>
          <label for="usage-metric">Show</label>
          <select
            id="usage-metric"
            value={metric}
            onChange={(e) => setChosen(e.currentTarget.value as Metric)}
          >
            <option value="credits">credits</option>
            <option value="tokens">tokens</option>
          </select>
        </div>
      </div>
      {usage ? (
        <dl class="figures">
          <div>
            <dt>Credit balance</dt>
            <dd data-testid="credit-balance">{formatNumber(usage.credit_balance)}</dd>
          </div>
          <div>
            <dt>Credits used</dt>
            <dd>{formatNumber(usage.totals.credits)}</dd>
          </div>
          <div>
            <dt>Requests</dt>
            <dd>{usage.totals.requests.toLocaleString()}</dd>
          </div>
          <div>
            <dt>Tokens in · out</dt>
            <dd>
              {usage.totals.input_tokens.toLocaleString()} · {usage.totals.output_tokens.toLocaleString()}
            </dd>
          </div>
        </dl>
      ) : null}
      <States loaded={data} empty="No usage in the last 30 days." isEmpty={(d) => d.series.length === 0}>
        {(d) => <Chart series={d.series} metric={metric} />}
      </States>
    </section>
  );
}

function RecentChats() {
  const chats = useLoad((signal) => get('/api/v2/chats', { page_size: 5 }, signal), []);
  return (
    <section class="card" aria-labelledby="chats-title">
      <h2 id="chats-title">Recent chats of this key</h2>
      <States
        loaded={chats}
        empty="No chats yet: try the chat playground."
        isEmpty={(d: any) => d.chats.length === 0}
      >
        {(d: any) => (
          <ul class="plain">
            {d.chats.map((c: any) => (
              <li key={c.id}>
                <a
                  href={`/console/playground/chat?chat=${c.id}`}
                  onClick={(e) => {
                    e.preventDefault();
                    navigate(`/playground/chat?chat=${c.id}`);
                  }}
                >
                  {c.title || `Chat ${c.id}`}
                </a>{' '}
                <small class="muted">{formatDate(c.created_at)}</small>
              </li>
            ))}
          </ul>
        )}
      </States>
    </section>
  );
}

/** Deliveries still failing: retries exhausted, or pending after a failed attempt. */
async function loadFailing(signal: AbortSignal) {
  const { projects } = await get('/api/v1/projects', { page_size: 100 }, signal);
  const hooks = (
    await Promise.all(
      projects.map(async (p: any) => {
        const { webhooks } = await get(`/api/v1/projects/${p.id}/webhooks`, { page_size: 100 }, signal);
        return webhooks.map((w: any) => ({ project: p, webhook: w }));
      }),
    )
  ).flat();
  const failing = await Promise.all(
    hooks.map(async ({ project, webhook }: any) => {
      const { deliveries } = await get(
        `/api/v1/projects/${project.id}/webhooks/${webhook.id}/deliveries`,
        { page_size: 20 },
        signal,
      );
      return deliveries
        .filter((d: any) => d.status === 'failed' || (d.status === 'pending' && d.attempt_count > 0))
        .map((d: any) => ({ ...d, project, webhook }));
    }),
  );
  return failing.flat();
}

function FailingDeliveries() {
  const failing = useLoad(loadFailing, []);
  return (
    <section class="card" aria-labelledby="failing-title">
      <h2 id="failing-title">Webhook deliveries failing now</h2>
      <States loaded={failing} empty="No failing deliveries." isEmpty={(d) => d.length === 0}>
        {(d) => (
          <ul class="plain">
            {d.map((x: any) => (
              <li key={`${x.webhook.id}-${x.id}`}>
                <StatusBadge status={x.status} /> {x.event_name} to <code class="break">{x.webhook.url}</code>{' '}
                ({x.project.name}) — {x.attempt_count} attempt(s), last answer {x.last_status_code ?? 'none'}
                {x.last_error ? `: ${x.last_error}` : ''}
              </li>
            ))}
          </ul>
        )}
      </States>
    </section>
  );
}

function PendingDocuments() {
  const docs = useLoad(async (signal) => {
    const lists = await Promise.all(
      ['queued', 'processing', 'failed'].map((status) =>
        get('/api/v1/data_center/documents', { processing_status: status, page_size: 20 }, signal),
      ),
    );
    return lists.flatMap((l) => l.documents);
  }, []);
  return (
    <section class="card" aria-labelledby="docs-title">
      <h2 id="docs-title">Documents not completed</h2>
      <States loaded={docs} empty="Every document is processed." isEmpty={(d) => d.length === 0}>
        {(d) => (
          <ul class="plain">
            {d.map((doc: any) => (
              <li key={doc.id}>
                <StatusBadge status={doc.processing_status} /> {doc.name}
                {doc.processing_error ? <span class="error-text"> — {doc.processing_error}</span> : null}
              </li>
            ))}
          </ul>
        )}
      </States>
    </section>
  );
}

export function DashboardPage() {
  return (
    <section aria-labelledby="page-title">
      <PageHeader title="Dashboard" />
      {isAdmin() ? <UsagePanel /> : <p class="muted">Credits and usage are shown to organization admins.</p>}
      <div class="grid">
        {canRead('/api/v2/chats') ? <RecentChats /> : null}
        {isAdmin() ? <FailingDeliveries /> : null}
        {canRead('/api/v1/data_center/documents') ? <PendingDocuments /> : null}
      </div>
    </section>
  );
}
