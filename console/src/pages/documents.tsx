import { useEffect, useRef, useState } from 'preact/hooks';
import { api, describeError, get, upload } from '../api';
import { namesOf, useRefs } from '../crud';
import { isAdmin } from '../session';
import {
  CheckList,
  ConfirmButton,
  Field,
  formatDate,
  PageHeader,
  Pager,
  States,
  StatusBadge,
  useLoad,
} from '../ui';

interface Document {
  id: number;
  name: string;
  processing_status: 'queued' | 'processing' | 'completed' | 'failed';
  processing_error: string | null;
  embedding_error: string | null;
  ocr_error: string | null;
  group_ids: number[];
  media_type: string;
  size_bytes: number;
  chunk_count: number;
  created_at: string;
}

interface UploadRow {
  id: string;
  name: string;
  loaded: number;
  total: number;
  state: 'uploading' | 'done' | 'failed';
  error?: string;
}

const STATUSES = ['queued', 'processing', 'completed', 'failed'];
const unfinished = (d: Document) => d.processing_status === 'queued' || d.processing_status === 'processing';

function size(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} kB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function Uploader({ groups, onUploaded }: { groups: any[]; onUploaded: () => void }) {
  const [groupIds, setGroupIds] = useState<(number | string)[]>([]);
  const [rows, setRows] = useState<UploadRow[]>([]);
  const input = useRef<HTMLInputElement>(null);
  const update = (id: string, change: Partial<UploadRow>) =>
    setRows((all) => all.map((r) => (r.id === id ? { ...r, ...change } : r)));

  const start = (files: File[]) => {
    const added = files.map((file, i) => ({
      file,
      row: {
        id: `${Date.now()}-${i}`,
        name: file.name,
        loaded: 0,
        total: file.size,
        state: 'uploading' as const,
      },
    }));
    setRows((all) => [...added.map((a) => a.row), ...all]);
    for (const { file, row } of added) {
      const form = new FormData();
      if (groupIds.length > 0) for (const id of groupIds) form.append('group_ids[]', String(id));
      else form.append('use_default_group', 'true');
      form.append('document', file, file.name);
      upload('/api/v1/data_center/documents', form, (p) =>
        update(row.id, { loaded: p.loaded, total: p.total || row.total }),
      ).then(
        () => {
          update(row.id, { state: 'done', loaded: row.total });
          onUploaded();
        },
        (err) => update(row.id, { state: 'failed', error: describeError(err) }),
      );
    }
    if (input.current) input.current.value = '';
  };

  return (
    <form
      class="card form"
      onSubmit={(e) => {
        e.preventDefault();
        const files = [...(input.current?.files ?? [])];
        if (files.length > 0) start(files);
      }}
    >
      <h2>Upload</h2>
      <Field label="Files" hint="PDF, DOCX, HTML, Markdown, text, CSV or JSON; several at once">
        {(id) => <input id={id} ref={input} type="file" multiple required />}
      </Field>
      {groups.length > 0 ? (
        <CheckList
          legend="Groups that may search them (none picked: the default group)"
          options={groups.map((g) => ({ id: g.id, label: g.name }))}
          value={groupIds}
          onChange={setGroupIds}
        />
      ) : null}
      <button type="submit">Upload</button>
      {rows.length > 0 ? (
        <ul class="plain uploads" aria-label="Uploads">
          {rows.map((r) => (
            <li key={r.id} class="upload-row" data-testid="upload">
              <span class="name">{r.name}</span>
              <progress max={r.total || 1} value={r.loaded} aria-label={`Upload of ${r.name}`} />
              <span class={r.state === 'failed' ? 'error-text' : 'muted'}>
                {r.state === 'uploading'
                  ? `${Math.round((r.loaded / (r.total || 1)) * 100)}%`
                  : r.state === 'done'
                    ? 'uploaded'
                    : r.error}
              </span>
            </li>
          ))}
        </ul>
      ) : null}
    </form>
  );
}

export function DocumentsPage() {
  const [page, setPage] = useState(1);
  const [status, setStatus] = useState('');
  const list = useLoad(
    (signal) =>
      get('/api/v1/data_center/documents', { page, page_size: 50, processing_status: status }, signal),
    [page, status],
  );
  const refs = useRefs({ groups: ['/api/v1/groups', 'groups'] });
  const documents: Document[] = list.data?.documents ?? [];
  const busy = documents.some(unfinished);
  // Processing runs in the background: follow it until every listed document settles.
  useEffect(() => {
    if (!busy) return;
    const timer = setInterval(list.reload, 1500);
    return () => clearInterval(timer);
  }, [busy, list.reload]);

  return (
    <section aria-labelledby="page-title">
      <PageHeader title="Documents" />
      <Uploader groups={refs.data?.groups ?? []} onUploaded={list.reload} />
      <div class="row">
        <h2>Knowledge base</h2>
        <label for="status-filter">Status</label>
        <select
          id="status-filter"
          value={status}
          onChange={(e) => {
            setPage(1);
            setStatus(e.currentTarget.value);
          }}
        >
          <option value="">all</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
        {busy ? (
          <span class="muted" role="status">
            Processing… (updates live)
          </span>
        ) : null}
      </div>
      <States loaded={list} empty="No documents." isEmpty={() => documents.length === 0}>
        {() => (
          <>
            <table class="table">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">Type · size</th>
                  <th scope="col">Passages</th>
                  <th scope="col">Groups</th>
                  <th scope="col">Uploaded</th>
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {documents.map((d) => (
                  <tr key={d.id} data-testid="document">
                    <td data-label="Name">{d.name}</td>
                    <td data-label="Status">
                      <StatusBadge status={d.processing_status} />
                      {d.processing_error ? <div class="error-text">{d.processing_error}</div> : null}
                      {d.embedding_error ? <div class="muted">Vectors: {d.embedding_error}</div> : null}
                      {d.ocr_error ? <div class="muted">OCR: {d.ocr_error}</div> : null}
                    </td>
                    <td data-label="Type · size">
                      {d.media_type} · {size(d.size_bytes)}
                    </td>
                    <td data-label="Passages">{d.chunk_count}</td>
                    <td data-label="Groups">{namesOf(refs.data?.groups, d.group_ids)}</td>
                    <td data-label="Uploaded">{formatDate(d.created_at)}</td>
                    <td class="row-actions">
                      {isAdmin() ? (
                        <ConfirmButton
                          label="Delete"
                          onConfirm={async () => {
                            await api('DELETE', `/api/v1/data_center/documents/${d.id}`);
                            list.reload();
                          }}
                        />
                      ) : null}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
            <Pager pagination={list.data?.pagination} onPage={setPage} />
          </>
        )}
      </States>
    </section>
  );
}
