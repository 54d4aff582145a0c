/**
 * The extractor process (started by `extractor.ts`): receives documents over IPC, one at a time,
 * and answers each with its chunks or the reason it cannot be read. It holds no database
 * connection and no secrets; whatever a hostile file does to it, the server only sees it stop.
 */
import { ExtractionError, reason } from './blocks.js';
import { chunkBlocks } from './chunk.js';
import { extractDocument } from './extract.js';
import type { ExtractionReply, ExtractionRequest } from './extraction-protocol.js';

async function answer(request: ExtractionRequest): Promise<ExtractionReply> {
  try {
    const extraction = await extractDocument(request.bytes, request.mediaType, request.limits);
    return {
      ok: true,
      chunks: chunkBlocks(extraction.blocks),
      pageCount: extraction.pageCount,
      ocrError: extraction.ocrError,
    };
  } catch (err) {
    // Anything the file makes a parser throw is the file's problem: final, never retried.
    if (err instanceof ExtractionError) return { ok: false, message: err.message, ocrError: err.ocrError };
    return { ok: false, message: `The file could not be read: ${reason(err)}`, ocrError: null };
  }
}

// The server stopped or gave up on this extraction: nothing is left to answer to.
process.on('disconnect', () => process.exit(1));
process.on('message', (request: ExtractionRequest) => {
  void answer(request).then((reply) => process.send?.(reply));
});
