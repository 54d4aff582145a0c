import { Marked, Renderer } from 'marked';
import sanitizeHtml from 'sanitize-html';
import { formatTimestamp } from '../../http/timestamps.js';
import type { SharedArtifact } from './service.js';

const markdown = new Marked({ gfm: true, breaks: false, async: false });
const plain = new Renderer();
// Tables scroll sideways in a wrapper instead of squeezing their columns on narrow screens; short
// cells never wrap (a date or a name stays whole), long prose cells wrap at spaces.
const PROSE_CELL_CHARS = 40;
markdown.use({
  renderer: {
    table(token) {
      return `<div class="table-scroll">${plain.table.call(this, token)}</div>\n`;
    },
    tablecell(token) {
      const html = plain.tablecell.call(this, token);
      if (token.text.length <= PROSE_CELL_CHARS) return html;
      return html.replace(/^<(td|th)/, '<$1 class="prose"');
    },
  },
});

/**
 * Markdown is rendered, then everything outside a plain-document allow list is dropped: no script,
 * no event handler, no style, no iframe, no `javascript:` URL. The page's Content-Security-Policy
 * forbids scripts as well, in case a sanitizer bug ever let one through.
 */
const SANITIZE: sanitizeHtml.IOptions = {
  allowedTags: [
    ...sanitizeHtml.defaults.allowedTags,
    'img',
    'h1',
    'h2',
    'del',
    's',
    'ins',
    'sup',
    'sub',
    'input',
  ],
  allowedAttributes: {
    // rel and target are set by transformTags below, never taken from the content.
    a: ['href', 'title', 'name', 'rel', 'target'],
    img: ['src', 'alt', 'title', 'width', 'height'],
    th: ['align', 'colspan', 'rowspan', 'class'],
    td: ['align', 'colspan', 'rowspan', 'class'],
    div: ['class'],
    ol: ['start'],
    code: ['class'],
    // GFM task lists; forced to disabled checkboxes below.
    input: ['type', 'checked', 'disabled'],
  },
  allowedClasses: { code: [/^language-[\w-]+$/], div: ['table-scroll'], td: ['prose'], th: ['prose'] },
  allowedSchemes: ['http', 'https', 'mailto'],
  allowedSchemesByTag: { img: ['http', 'https', 'data'] },
  allowProtocolRelative: false,
  disallowedTagsMode: 'escape',
  transformTags: {
    a: sanitizeHtml.simpleTransform('a', { rel: 'noopener noreferrer nofollow', target: '_blank' }),
    input: (_tag, attribs) => ({
      tagName: 'input',
      attribs: { type: 'checkbox', disabled: '', ...('checked' in attribs ? { checked: '' } : {}) },
    }),
  },
};

export function renderMarkdown(content: string): string {
  return sanitizeHtml(markdown.parse(content) as string, SANITIZE);
}

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};
export const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]);

export const SHARE_PAGE_CSP =
  "default-src 'none'; style-src 'unsafe-inline'; img-src https: data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const STYLE = `
:root { color-scheme: light dark; }
* { box-sizing: border-box; }
body { margin: 0; font: 1.0625rem/1.6 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1f2328; background: #fff; -webkit-text-size-adjust: 100%; }
main { max-width: 46rem; margin: 0 auto; padding: 1.5rem 1rem 3rem; overflow-wrap: break-word; }
header { border-bottom: 1px solid #d0d7de; margin-bottom: 1.5rem; }
header p { color: #59636e; font-size: .875rem; margin: 0 0 .75rem; }
h1, h2, h3, h4 { line-height: 1.25; margin: 1.6em 0 .6em; }
header h1 { margin-top: 0; }
a { color: #0969da; }
img { max-width: 100%; height: auto; }
pre { background: #f6f8fa; padding: .75rem 1rem; border-radius: 6px; overflow-x: auto; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
blockquote { margin: 0; padding: 0 1em; color: #59636e; border-left: .25em solid #d0d7de; }
.table-scroll { overflow-x: auto; max-width: 100%; margin: 1em 0; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d7de; padding: .375rem .75rem; white-space: nowrap; overflow-wrap: normal;
  vertical-align: top; }
th.prose, td.prose { white-space: normal; min-width: 16rem; }
@media (prefers-color-scheme: dark) {
  body { color: #e6edf3; background: #0d1117; }
  header { border-color: #30363d; } header p, blockquote { color: #9198a1; }
  a { color: #4493f8; } pre { background: #161b22; } th, td, blockquote { border-color: #30363d; }
}`;

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

/** The public, read-only page of an artifact. */
export function renderSharePage(artifact: SharedArtifact): string {
  const updated = formatTimestamp(artifact.updatedAt).slice(0, 10);
  return page(
    artifact.name,
    `<header><h1>${escapeHtml(artifact.name)}</h1><p>Shared artifact · updated ${updated}</p></header>
<article>
${renderMarkdown(artifact.content)}
</article>`,
  );
}

export function renderNotFoundPage(): string {
  return page(
    'Artifact not found',
    '<h1>Artifact not found</h1><p>This link does not lead to a shared artifact. It may have been deleted.</p>',
  );
}
