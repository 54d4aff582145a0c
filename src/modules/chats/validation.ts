import { badRequest } from '../../http/errors.js';

/** Spec 7.1: missing or empty content is a 400; whitespace alone counts as empty. */
export function requireContent(content: string): void {
  if (content.trim() === '')
    throw badRequest('content must not be empty', { content: ['must not be empty'] });
}
