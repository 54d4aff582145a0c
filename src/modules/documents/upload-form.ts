import { createHash } from 'node:crypto';
import type { MultipartFile, MultipartValue } from '@fastify/multipart';
import type { FastifyRequest } from 'fastify';
import { ApiError, badRequest, unprocessable } from '../../http/errors.js';
import type { UploadInput } from './service.js';

const MAX_NAME_LENGTH = 255;
const GROUP_FIELDS = new Set(['group_ids[]', 'group_ids']);

const mebibytes = (bytes: number) =>
  bytes >= 1024 * 1024 ? `${Math.round((bytes / (1024 * 1024)) * 10) / 10} MB` : `${bytes} bytes`;

/**
 * Reads the upload's multipart body: the `document` file, `group_ids[]` (repeated) or
 * `use_default_group=true`, and an optional `name`. Whatever a client sends wrong is a 4xx with
 * the v1 body, never a 500: busboy's own errors (bad boundary, truncated body) become 400s.
 */
export async function readUploadForm(request: FastifyRequest, maxBytes: number): Promise<UploadInput> {
  if (!request.isMultipart()) {
    throw badRequest('Send the document as multipart/form-data with the file in the field `document`', {
      document: ['must be sent as multipart/form-data'],
    });
  }
  let file: { fileName: string; bytes: Buffer } | null = null;
  const groupValues: string[] = [];
  let useDefault: string | null = null;
  let name: string | null = null;
  try {
    for await (const part of request.parts()) {
      if (part.type === 'file') {
        file = await readFilePart(part, file !== null, maxBytes);
        continue;
      }
      const value = fieldValue(part);
      if (GROUP_FIELDS.has(part.fieldname)) groupValues.push(...value.split(',').map((v) => v.trim()));
      else if (part.fieldname === 'use_default_group') useDefault = value.trim();
      else if (part.fieldname === 'name') name = value.trim();
      else if (part.fieldname === 'document') {
        throw badRequest('The field `document` must be a file', { document: ['must be a file, not text'] });
      }
    }
  } catch (err) {
    throw asUploadError(err, maxBytes);
  }

  if (useDefault !== null && useDefault !== 'true' && useDefault !== 'false') {
    throw badRequest('use_default_group must be true or false', {
      use_default_group: ['must be true or false'],
    });
  }
  const groupIds = groupValues.filter((value) => value !== '').map((value) => parseGroupId(value));
  if (groupIds.length === 0 && useDefault !== 'true') {
    throw badRequest('Give group_ids[] (one or more groups) or use_default_group=true', {
      'group_ids[]': ['is required unless use_default_group is true'],
    });
  }
  if (!file) {
    throw unprocessable('The file field `document` is required', { document: ['is required'] });
  }
  if (file.bytes.length === 0) {
    throw unprocessable('The uploaded file is empty', { document: ['must not be empty'] });
  }
  return {
    name: (name || file.fileName || 'document').slice(0, MAX_NAME_LENGTH),
    bytes: file.bytes,
    groupIds,
    useDefaultGroup: useDefault === 'true',
  };
}

async function readFilePart(part: MultipartFile, haveOne: boolean, maxBytes: number) {
  if (part.fieldname !== 'document' || haveOne) {
    // Drain it so the rest of the form can be read, then refuse: one file per upload.
    part.file.resume();
    throw badRequest(
      part.fieldname === 'document'
        ? 'Upload one file per request'
        : `Unexpected file field \`${part.fieldname}\`: send the file as \`document\``,
      { [part.fieldname]: ['is not accepted'] },
    );
  }
  const bytes = await part.toBuffer();
  if (bytes.length > maxBytes) throw tooLarge(maxBytes);
  return { fileName: baseName(part.filename ?? ''), bytes };
}

function fieldValue(part: MultipartValue): string {
  if (part.valueTruncated) {
    throw badRequest(`The field \`${part.fieldname}\` is too long`, { [part.fieldname]: ['is too long'] });
  }
  return typeof part.value === 'string' ? part.value : String(part.value ?? '');
}

function parseGroupId(value: string): number {
  if (!/^\d{1,10}$/.test(value) || Number(value) < 1 || Number(value) > 2147483647) {
    throw badRequest(`group_ids[] must be group ids (positive integers), got "${value.slice(0, 40)}"`, {
      'group_ids[]': ['must be positive integers'],
    });
  }
  return Number(value);
}

/** Browsers may send a full client path (C:\fakepath\report.pdf); only the last segment is the name. */
function baseName(fileName: string): string {
  return fileName.split(/[\\/]/).pop()?.trim() ?? '';
}

const tooLarge = (maxBytes: number) =>
  new ApiError(
    413,
    'payload_too_large',
    `The file is larger than the upload limit of ${mebibytes(maxBytes)}`,
    {
      document: [`must be at most ${maxBytes} bytes`],
    },
  );

function asUploadError(err: unknown, maxBytes: number): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { code?: string; statusCode?: number; message?: string };
  if (e?.code === 'FST_REQ_FILE_TOO_LARGE') return tooLarge(maxBytes);
  if (e?.statusCode === 413) {
    return new ApiError(413, 'payload_too_large', 'The form has too many fields or files');
  }
  return badRequest(
    `The multipart body could not be read: ${e?.message ?? 'malformed'}`,
    {},
    'malformed_multipart',
  );
}

/** What an upload's Idempotency-Key is held to: the file's bytes, its name and its groups. */
export function uploadDigest(input: UploadInput): string {
  const { name, groupIds, useDefaultGroup } = input;
  return createHash('sha256')
    .update(JSON.stringify({ name, groupIds, useDefaultGroup }))
    .update(input.bytes)
    .digest('hex');
}
