import type { Principal } from '../core/principal.js';
import { forbidden } from '../http/errors.js';

/** Organization keys and admin users manage the organization; members only use it. */
export function requireAdmin(principal: Principal): void {
  if (principal.role !== 'admin') throw forbidden('Members may not change management resources');
}

/** Reads reserved to admins (usage, users, API keys): the refusal says what may not be read. */
export function requireAdminToRead(principal: Principal, what: string): void {
  if (principal.role !== 'admin')
    throw forbidden(`Members may not read ${what}; only organization admins may`);
}

export const isAdmin = (principal: Principal) => principal.role === 'admin';
