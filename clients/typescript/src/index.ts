export {
  createScriptoriumClient,
  type RequestOptions,
  type ScriptoriumClient,
  type ScriptoriumClientOptions,
  type SendOptions,
} from './client.js';
export { ScriptoriumError } from './errors.js';
export type { components, operations, paths } from './schema.js';
export type { ResumeOptions } from './streams.js';
export type * from './types.js';
export { verifyWebhook, WebhookVerificationError } from './webhooks.js';
