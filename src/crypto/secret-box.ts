import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Encrypts secrets kept in the database (provider keys, integration headers) with AES-256-GCM. */
export interface SecretBox {
  encrypt(plaintext: string): string;
  decrypt(ciphertext: string): string;
}

export function createSecretBox(secret: string): SecretBox {
  const key = createHash('sha256').update(secret).digest();
  return {
    encrypt(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return [
        'v1',
        iv.toString('base64'),
        cipher.getAuthTag().toString('base64'),
        body.toString('base64'),
      ].join(':');
    },
    decrypt(ciphertext) {
      const [version, iv, tag, body] = ciphertext.split(':');
      if (version !== 'v1' || !iv || !tag || body === undefined)
        throw new Error('Unreadable encrypted secret');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64'));
      decipher.setAuthTag(Buffer.from(tag, 'base64'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64')), decipher.final()]).toString('utf8');
    },
  };
}

/**
 * SECRET_KEY when set; otherwise a key generated once into DATA_DIR/secret.key, so a fresh
 * install works without configuration. Several processes on one PostgreSQL need SECRET_KEY.
 */
export function resolveSecret(
  secretKey: string | null,
  dataDir: string,
): { secret: string; generated: boolean } {
  if (secretKey) return { secret: secretKey, generated: false };
  const file = path.join(dataDir, 'secret.key');
  if (existsSync(file)) return { secret: readFileSync(file, 'utf8').trim(), generated: true };
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(32).toString('base64url');
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  return { secret, generated: true };
}
