import type { FastifyRequest } from 'fastify';
import type { AuditActor } from '../audit/record.js';
import { type ServiceContext, serviceContext } from '../core/context.js';
import type { AppDeps } from '../core/deps.js';
import type { OrgPrincipal } from '../core/principal.js';
import { forbidden } from './errors.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The process's resources, from the composition root (src/root.ts). */
    deps: AppDeps;
  }
}

/** The service context of a request made with an organization or personal key. */
export function contextOf(request: FastifyRequest): ServiceContext {
  const principal = request.principal;
  if (!principal || principal.organizationId === null)
    throw forbidden('This endpoint needs an organization key');
  return serviceContext(request.server.deps, principal as OrgPrincipal, request.log, request.id);
}

/** Who a request acts as, for audit records of routes without a service context (super admin). */
export function actorOf(request: FastifyRequest): AuditActor {
  if (!request.principal) throw forbidden('This endpoint needs an API key');
  return { principal: request.principal, requestId: request.id };
}
