/** An image's type and pixel size, read from its header; null when the bytes are not such an image. */
export interface ImageInfo {
  mediaType: 'image/png' | 'image/jpeg' | 'image/gif' | 'image/webp';
  width: number;
  height: number;
}

export const IMAGE_FORMAT_NAMES: Record<ImageInfo['mediaType'], string> = {
  'image/png': 'PNG',
  'image/jpeg': 'JPEG',
  'image/gif': 'GIF',
  'image/webp': 'WebP',
};

export function imageInfo(bytes: Uint8Array): ImageInfo | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length >= 24 && b.readUInt32BE(0) === 0x89504e47 && b.readUInt32BE(4) === 0x0d0a1a0a) {
    if (b.toString('ascii', 12, 16) !== 'IHDR') return null;
    return sized('image/png', b.readUInt32BE(16), b.readUInt32BE(20));
  }
  if (b.length >= 10 && (b.toString('ascii', 0, 6) === 'GIF87a' || b.toString('ascii', 0, 6) === 'GIF89a'))
    return sized('image/gif', b.readUInt16LE(6), b.readUInt16LE(8));
  if (b.length >= 30 && b.toString('ascii', 0, 4) === 'RIFF' && b.toString('ascii', 8, 12) === 'WEBP')
    return webp(b);
  if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8) return jpeg(b);
  return null;
}

function sized(mediaType: ImageInfo['mediaType'], width: number, height: number): ImageInfo | null {
  return width > 0 && height > 0 ? { mediaType, width, height } : null;
}

function webp(b: Buffer): ImageInfo | null {
  const chunk = b.toString('ascii', 12, 16);
  if (chunk === 'VP8X') return sized('image/webp', 1 + b.readUIntLE(24, 3), 1 + b.readUIntLE(27, 3));
  if (chunk === 'VP8 ' && b.length >= 30)
    return sized('image/webp', b.readUInt16LE(26) & 0x3fff, b.readUInt16LE(28) & 0x3fff);
  if (chunk === 'VP8L' && b.length >= 25 && b[20] === 0x2f) {
    const bits = b.readUInt32LE(21);
    return sized('image/webp', (bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1);
  }
  return null;
}

/** Walks the JPEG segments to the first start-of-frame marker, which holds the size. */
function jpeg(b: Buffer): ImageInfo | null {
  let offset = 2;
  while (offset + 9 < b.length) {
    if (b[offset] !== 0xff) return null;
    const marker = b[offset + 1];
    if (marker === 0xff) {
      offset += 1;
      continue;
    }
    const length = b.readUInt16BE(offset + 2);
    const isFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
    if (isFrame) return sized('image/jpeg', b.readUInt16BE(offset + 7), b.readUInt16BE(offset + 5));
    if (length < 2) return null;
    offset += 2 + length;
  }
  return null;
}
