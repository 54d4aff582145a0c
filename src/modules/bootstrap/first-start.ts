import type { BootstrapResult } from './service.js';

/**
 * The first start's keys as a block for a person at a terminal (`npm start` in a TTY); the JSON
 * log line stays for log collectors. The keys are shown only this once.
 */
export function firstStartBlock(keys: BootstrapResult, baseUrl: string): string {
  const rows: [string, string][] = [
    ['Organization key', keys.organization_key],
    ['Personal key (admin)', keys.personal_key],
    ['Super admin key', keys.super_admin_key],
    ['Organization id', String(keys.organization_id)],
    ['Project id', String(keys.project_id)],
  ];
  const width = Math.max(...rows.map(([label]) => label.length));
  return [
    '',
    '  Scriptorium is ready. These keys are shown only once: store them now.',
    '',
    ...rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`),
    '',
    `  Try: curl -s ${baseUrl}/api/v1/projects -H "Authorization: Bearer ${keys.organization_key}"`,
    `  API reference: ${baseUrl}/docs`,
    '',
  ].join('\n');
}

/** The one line for a port another process holds (no stack trace: nothing is wrong with the service). */
export function portInUseMessage(host: string, port: number): string {
  return `Cannot listen on ${host}:${port}: the port is in use by another process. Stop it, or set PORT to a free port.`;
}
