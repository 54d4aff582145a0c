import { describe, expect, it } from 'vitest';
import { imageInfo } from '../src/llm/image-info.js';

/** The image header reader behind attachment checks and the built-in model's descriptions (issue 18). */
describe('imageInfo', () => {
  it('reads PNG, GIF, JPEG and WebP sizes', () => {
    const png = Buffer.from(
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
      'base64',
    );
    expect(imageInfo(png)).toEqual({ mediaType: 'image/png', width: 1, height: 1 });
    const gif = Buffer.from('474946383961030002008000000000ffffff', 'hex');
    expect(imageInfo(gif)).toEqual({ mediaType: 'image/gif', width: 3, height: 2 });
    // SOI, an APP0 segment to skip, then a baseline frame of 7 wide by 5 high.
    const jpeg = Buffer.from(
      'ffd8' + 'ffe0000a4a46494600010100' + 'ffc0001108000500070301220002110103110100' + 'ffd9',
      'hex',
    );
    expect(imageInfo(jpeg)).toEqual({ mediaType: 'image/jpeg', width: 7, height: 5 });
    const webp = Buffer.concat([
      Buffer.from('RIFF'),
      Buffer.from([30, 0, 0, 0]),
      Buffer.from('WEBPVP8X'),
      Buffer.from([10, 0, 0, 0, 0, 0, 0, 0]),
      Buffer.from([99, 0, 0, 49, 0, 0]),
    ]);
    expect(imageInfo(webp)).toEqual({ mediaType: 'image/webp', width: 100, height: 50 });
  });

  it('refuses what is not an image of a known type', () => {
    for (const bytes of [
      Buffer.from('hello world, not an image at all'),
      Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex'),
      Buffer.from('ffd8ffe0', 'hex'),
      Buffer.from('474946383961000000008000', 'hex'),
    ])
      expect(imageInfo(bytes)).toBeNull();
  });
});
