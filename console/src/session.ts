/**
 * Who is signed in. The key lives in sessionStorage only (one tab, gone with it), never in a URL.
 * Signing in or out bumps `generation`: the whole page tree is rebuilt, every cache is dropped
 * and responses still in flight for the previous key are discarded, so one organization's data
 * never shows under another key.
 */

const KEY_ITEM = 'scriptorium.console.key';
/** Items of the console in sessionStorage besides the key (stream resume points...). */
export const STATE_PREFIX = 'scriptorium.console.';

export type Role = 'admin' | 'member' | 'super_admin';

export interface Capabilities {
  role: Role;
  /** API list paths this key may read (probed with a GET at sign-in). */
  readable: Set<string>;
  keyKind: 'organization' | 'personal' | 'super_admin' | 'unknown';
}

interface State {
  key: string | null;
  capabilities: Capabilities | null;
  generation: number;
  notice: string | null;
}

const state: State = {
  key: sessionStorage.getItem(KEY_ITEM),
  capabilities: null,
  generation: 1,
  notice: null,
};
const listeners = new Set<() => void>();

export const currentKey = () => state.key;
export const generation = () => state.generation;
export const capabilities = () => state.capabilities;
export const notice = () => state.notice;

export function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function changed() {
  for (const listener of [...listeners]) listener();
}

/** Drops everything the console kept for the previous key. */
function clearState() {
  for (let i = sessionStorage.length - 1; i >= 0; i--) {
    const name = sessionStorage.key(i);
    if (name?.startsWith(STATE_PREFIX)) sessionStorage.removeItem(name);
  }
  for (const clear of cacheClearers) clear();
}

const cacheClearers = new Set<() => void>();
/** Registers a module-level cache to empty on every sign-in and sign-out. */
export function onSessionChange(clear: () => void) {
  cacheClearers.add(clear);
}

export function setSignedIn(key: string, caps: Capabilities) {
  clearState();
  state.key = key;
  state.capabilities = caps;
  state.notice = null;
  state.generation += 1;
  sessionStorage.setItem(KEY_ITEM, key);
  changed();
}

/** Restores capabilities for the key kept across a reload (same key, same generation of data). */
export function setCapabilities(caps: Capabilities) {
  state.capabilities = caps;
  changed();
}

export function signOut(message: string | null = null) {
  clearState();
  state.key = null;
  state.capabilities = null;
  state.notice = message;
  state.generation += 1;
  changed();
}

export function keyKindOf(key: string): Capabilities['keyKind'] {
  if (key.startsWith('sk_org_')) return 'organization';
  if (key.startsWith('sk_usr_')) return 'personal';
  if (key.startsWith('sk_adm_')) return 'super_admin';
  return 'unknown';
}

export const canRead = (path: string) => state.capabilities?.readable.has(path) ?? false;
export const isAdmin = () => state.capabilities?.role === 'admin';
