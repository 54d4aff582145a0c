import type { ComponentChildren, JSX } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { describeError, StaleResponse } from './api';

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/** Runs `load` on mount and whenever `deps` change; responses for a previous key are dropped. */
export function useLoad<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  // The caller names what the load depends on (`deps`).
  useEffect(() => {
    const controller = new AbortController();
    setLoading(true);
    load(controller.signal).then(
      (value) => {
        if (controller.signal.aborted) return;
        setData(value);
        setError(null);
        setLoading(false);
      },
      (err) => {
        if (controller.signal.aborted || err instanceof StaleResponse) return;
        setError(err);
        setLoading(false);
      },
    );
    return () => controller.abort();
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}

export function Loading({ label = 'Loading…' }: { label?: string }) {
  return (
    <p class="muted" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" /> {label}
    </p>
  );
}

export function ErrorMessage({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {describeError(error)}
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** The three states of every list: loading, failed, empty; else the content. */
export function States<T>({
  loaded,
  empty,
  isEmpty,
  children,
}: {
  loaded: Loaded<T>;
  empty: string;
  isEmpty: (data: T) => boolean;
  children: (data: T) => ComponentChildren;
}) {
  if (loaded.error && loaded.data === undefined) return <ErrorMessage error={loaded.error} />;
  if (loaded.data === undefined) return <Loading />;
  return (
    <>
      {loaded.error ? <ErrorMessage error={loaded.error} /> : null}
      {isEmpty(loaded.data) ? <Empty>{empty}</Empty> : children(loaded.data)}
    </>
  );
}

export function PageHeader({ title, children }: { title: string; children?: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · Scriptorium console`;
  }, [title]);
  return (
    <header class="page-header">
      <h1 id="page-title" tabIndex={-1}>
        {title}
      </h1>
      {children ? <div class="actions">{children}</div> : null}
    </header>
  );
}

/** A secret the API returns once: shown with a copy button and a warning. */
export function SecretOnce({ label, value, onDone }: { label: string; value: string; onDone?: () => void }) {
  const [copied, setCopied] = useState(false);
  const ref = useRef<HTMLInputElement>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value);
      setCopied(true);
    } catch {
      ref.current?.select();
    }
  };
  return (
    <section class="secret" aria-label={label}>
      <p>
        <strong>{label}</strong> — shown only now. Store it safely: the service keeps only a hash.
      </p>
      <div class="row">
        <input
          ref={ref}
          readOnly
          value={value}
          aria-label={label}
          class="mono"
          onFocus={(e) => e.currentTarget.select()}
        />
        <button type="button" onClick={copy}>
          {copied ? 'Copied' : 'Copy'}
        </button>
        {onDone ? (
          <button type="button" class="secondary" onClick={onDone}>
            Done
          </button>
        ) : null}
      </div>
    </section>
  );
}

/** A destructive action in two steps, without a browser dialog. */
export function ConfirmButton({
  label,
  confirmLabel,
  onConfirm,
  disabled,
}: {
  label: string;
  confirmLabel?: string;
  onConfirm: () => Promise<unknown> | undefined;
  disabled?: boolean;
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  if (!asking)
    return (
      <>
        <button type="button" class="danger" disabled={disabled} onClick={() => setAsking(true)}>
          {label}
        </button>
        <ErrorMessage error={error} />
      </>
    );
  return (
    <span class="confirm">
      <button
        type="button"
        class="danger"
        disabled={busy}
        onClick={async () => {
          setBusy(true);
          setError(null);
          try {
            await onConfirm();
          } catch (err) {
            if (!(err instanceof StaleResponse)) setError(err);
          } finally {
            setBusy(false);
            setAsking(false);
          }
        }}
      >
        {confirmLabel ?? `Yes, ${label.toLowerCase()}`}
      </button>
      <button type="button" class="secondary" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

export interface PaginationInfo {
  page: number;
  page_size: number;
  total_count: number;
  total_pages: number;
}

export function Pager({
  pagination,
  onPage,
}: {
  pagination?: PaginationInfo;
  onPage: (page: number) => void;
}) {
  if (!pagination || pagination.total_pages <= 1) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={pagination.page <= 1} onClick={() => onPage(pagination.page - 1)}>
        Previous
      </button>
      <span>
        Page {pagination.page} of {pagination.total_pages} ({pagination.total_count})
      </span>
      <button
        type="button"
        disabled={pagination.page >= pagination.total_pages}
        onClick={() => onPage(pagination.page + 1)}
      >
        Next
      </button>
    </nav>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-${status.replace(/[^a-z_]/g, '')}`}>{status}</span>;
}

/** Runs an action with busy and error state, for forms and buttons. */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = useCallback(async <T,>(action: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError(null);
    try {
      return await action();
    } catch (err) {
      if (!(err instanceof StaleResponse)) setError(err);
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, setError };
}

export function formatDate(value: string | null | undefined): string {
  if (!value) return '—';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : date.toLocaleString();
}

export function Field({
  label,
  hint,
  children,
}: {
  label: string;
  hint?: string;
  children: (id: string) => JSX.Element;
}) {
  const id = useRef(`f-${Math.random().toString(36).slice(2, 9)}`).current;
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {children(id)}
      {hint ? <small class="muted">{hint}</small> : null}
    </div>
  );
}

/** A set of checkboxes for picking ids (groups, categories, skills...). */
export function CheckList({
  legend,
  options,
  value,
  onChange,
}: {
  legend: string;
  options: { id: number | string; label: string }[];
  value: (number | string)[];
  onChange: (next: (number | string)[]) => void;
}) {
  return (
    <fieldset class="checklist">
      <legend>{legend}</legend>
      {options.length === 0 ? <span class="muted">None available</span> : null}
      {options.map((option) => (
        <label key={option.id} class="check">
          <input
            type="checkbox"
            checked={value.includes(option.id)}
            onChange={(e) =>
              onChange(e.currentTarget.checked ? [...value, option.id] : value.filter((v) => v !== option.id))
            }
          />{' '}
          {option.label}
        </label>
      ))}
    </fieldset>
  );
}
