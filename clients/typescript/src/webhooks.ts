import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import type { WebhookEvent } from './types.js';

export { WebhookVerificationError };

/**
 * Checks a delivery's Standard Webhooks signature (`webhook-id`, `webhook-timestamp`,
 * `webhook-signature`; timestamps older than five minutes are refused) against the webhook's
 * `whsec_...` secret and returns its payload. `body` must be the raw request body, unparsed.
 * Throws `WebhookVerificationError` when the delivery is not authentic.
 */
export function verifyWebhook(
  body: string | Uint8Array,
  headers: Headers | Record<string, string | string[] | undefined>,
  secret: string,
): WebhookEvent {
  const get = (name: string): string => {
    const value = headers instanceof Headers ? headers.get(name) : headers[name];
    return (Array.isArray(value) ? value[0] : value) ?? '';
  };
  const payload = typeof body === 'string' ? body : new TextDecoder().decode(body);
  return new Webhook(secret).verify(payload, {
    'webhook-id': get('webhook-id'),
    'webhook-timestamp': get('webhook-timestamp'),
    'webhook-signature': get('webhook-signature'),
  }) as WebhookEvent;
}
