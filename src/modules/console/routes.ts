import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';

/** Where `npm run build:console` (run by `npm ci` through `prepare`) writes the operator console. */
export const CONSOLE_DIST = fileURLToPath(new URL('../../../console/dist', import.meta.url));

/**
 * The console talks only to this origin's API and loads nothing inline: no inline scripts or
 * styles, no frames, no plugins. Markdown it renders is sanitized too, but this is the backstop.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "form-action 'self'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

interface StaticFile {
  body: Buffer;
  type: string;
}

/**
 * Every file of the build, read once into memory (a few hundred kB): requests are answered from
 * this map only, so no request path ever reaches the file system.
 */
function readBuild(dir: string): Map<string, StaticFile> | null {
  if (!existsSync(path.join(dir, 'index.html'))) return null;
  const files = new Map<string, StaticFile>();
  const walk = (sub: string) => {
    for (const name of readdirSync(path.join(dir, sub))) {
      const rel = sub ? `${sub}/${name}` : name;
      const full = path.join(dir, rel);
      if (statSync(full).isDirectory()) walk(rel);
      else
        files.set(rel, {
          body: readFileSync(full),
          type: TYPES[path.extname(name)] ?? 'application/octet-stream',
        });
    }
  };
  walk('');
  return files;
}

const NOT_BUILT = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Console not built</title></head>
<body><main><h1>The operator console is not built</h1>
<p>This service serves the console from <code>console/dist</code>, which is missing.
Build it with <code>npm run build:console</code> (<code>npm ci</code> does this by itself), then reload.</p>
<p>The API at <code>/api/v1</code> and <code>/api/v2</code> and its reference at <a href="/docs">/docs</a> work without it.</p>
</main></body></html>`;

function secure(reply: FastifyReply): FastifyReply {
  return reply
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('x-frame-options', 'DENY');
}

/**
 * The operator console (a single-page app) at `/console`: built assets, and `index.html` for
 * every other path under it so the app's own routes survive a reload.
 */
export function consoleRoutes(dir: string = CONSOLE_DIST): FastifyPluginAsync {
  return async (app) => {
    let files = readBuild(dir);
    // A build made after the server started (or a rebuild with new hashed names) is picked up
    // without a restart: a missing index.html or asset reads the directory again.
    const lookup = (rel: string, reread: boolean) => {
      if (files?.has(rel) || !reread) return files?.get(rel);
      files = readBuild(dir);
      return files?.get(rel);
    };

    const serve = async (url: string, reply: FastifyReply) => {
      secure(reply);
      // Not decoded: every built file name is plain ASCII, and a malformed escape cannot throw.
      const rel = url.split('?')[0].replace(/^\/console\/?/, '');
      const asset = rel.startsWith('assets/');
      const file = rel && !rel.endsWith('/') ? lookup(rel, asset) : undefined;
      if (file) {
        reply.header('cache-control', asset ? 'public, max-age=31536000, immutable' : 'no-cache');
        return reply.type(file.type).send(file.body);
      }
      // A missing hashed asset is a real 404: answering index.html would be parsed as a script.
      if (asset) return reply.status(404).type('text/plain; charset=utf-8').send('Not found');
      const index = lookup('index.html', true);
      if (!index) {
        return reply.status(503).header('cache-control', 'no-store').type(TYPES['.html']).send(NOT_BUILT);
      }
      return reply.header('cache-control', 'no-cache').type(index.type).send(index.body);
    };

    const schema = { hide: true };
    app.get('/console', { schema }, (request, reply) => serve(request.url, reply));
    app.get('/console/*', { schema }, (request, reply) => serve(request.url, reply));
  };
}
