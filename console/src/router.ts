/**
 * Paths under /console, kept in the address bar so reload and the back button work. A route
 * table of a dozen flat pages needs no router library: one pushState and a popstate listener.
 */
import { useEffect, useState } from 'preact/hooks';

export const BASE = '/console';

export function currentPath(): string {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : '/';
  return path === '' ? '/' : path;
}

const listeners = new Set<() => void>();
window.addEventListener('popstate', () => {
  for (const listener of [...listeners]) listener();
});

export function navigate(path: string, replace = false) {
  const url = `${BASE}${path === '/' ? '/' : path}`;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  for (const listener of [...listeners]) listener();
}

export function usePath(): string {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const update = () => setPath(currentPath());
    listeners.add(update);
    return () => {
      listeners.delete(update);
    };
  }, []);
  return path;
}

/** Query parameters of the console URL (never a key: only ids and filters). */
export function searchParam(name: string): string | null {
  return new URLSearchParams(location.search).get(name);
}
