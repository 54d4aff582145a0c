import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { pagination } from '../../http/pagination.js';
import { v1Responses } from '../../http/schemas.js';
import { presentAuditEvent } from './presenter.js';
import { AdminAuditEventQuery, AuditEventListResponse } from './schemas.js';
import { listAllAuditEvents, listAuditEvents } from './service.js';

const tags = ['Audit events'];

export const auditEventRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/audit_events',
    {
      // Issue 19: organization admins read their organization's records, super admins every one.
      config: { access: 'any_key' },
      schema: {
        operationId: 'listAuditEvents',
        description:
          "The audit log: every write through API v1, every chat archive and every tool-approval decision, with actor, action, resource, changed field names (never values) and request id. Organization admins read their own organization's; super admin keys read every organization's (`organization_id` narrows it to one). Filters: from, to, action, resource_type, actor_api_key_id. Paginated.",
        tags,
        summary: 'Who changed what, newest first (organization admins; super admins for all organizations)',
        querystring: AdminAuditEventQuery,
        response: v1Responses({ 200: AuditEventListResponse }),
      },
    },
    async (request) => {
      const { rows, total } =
        request.principal?.kind === 'super_admin'
          ? await listAllAuditEvents(app.deps.database.db, request.query)
          : await listAuditEvents(contextOf(request), request.query);
      return { audit_events: rows.map(presentAuditEvent), pagination: pagination(request.query, total) };
    },
  );

  // The same for super admin keys under /api/v1/admin/*, where DESIGN.md 4 puts their endpoints.
  app.get(
    '/admin/audit_events',
    {
      config: { access: 'super_admin' },
      schema: {
        operationId: 'listAllAuditEvents',
        description:
          'The audit log of every organization (super admin keys), with the same filters plus organization_id. Paginated.',
        tags,
        summary: "Every organization's audit events, newest first (super admin)",
        querystring: AdminAuditEventQuery,
        response: v1Responses({ 200: AuditEventListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listAllAuditEvents(app.deps.database.db, request.query);
      return { audit_events: rows.map(presentAuditEvent), pagination: pagination(request.query, total) };
    },
  );
};
