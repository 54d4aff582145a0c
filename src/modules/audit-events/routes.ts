import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { pagination } from '../../http/pagination.js';
import { v1Responses } from '../../http/schemas.js';
import { presentAuditEvent } from './presenter.js';
import { AdminAuditEventQuery, AuditEventListResponse, AuditEventQuery } from './schemas.js';
import { listAllAuditEvents, listAuditEvents } from './service.js';

const tags = ['Audit events'];

export const auditEventRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/audit_events',
    {
      schema: {
        operationId: 'listAuditEvents',
        description:
          "The audit log of the caller's organization: every write through API v1, every chat archive and every tool-approval decision, with actor, action, resource, changed field names (never values) and request id. Filters: from, to, action, resource_type, actor_api_key_id. Organization admins only. Paginated.",
        tags,
        summary: "Who changed what in the caller's organization, newest first (organization admins)",
        querystring: AuditEventQuery,
        response: v1Responses({ 200: AuditEventListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listAuditEvents(contextOf(request), request.query);
      return { audit_events: rows.map(presentAuditEvent), pagination: pagination(request.query, total) };
    },
  );

  // Super admin keys act on /api/v1/admin/* only (DESIGN.md 4), so they read every organization's
  // records here rather than at /audit_events.
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
