// Every table of the service; drizzle-kit generates migrations from this file.

export * from './artifacts.js';
export * from './async-requests.js';
export * from './audit.js';
export * from './chat-queue.js';
export * from './chats.js';
export * from './core.js';
export * from './documents.js';
export * from './idempotency.js';
export * from './integrations.js';
export * from './management.js';
export * from './stream-events.js';
export * from './tool-approvals.js';
export * from './webhook-deliveries.js';
