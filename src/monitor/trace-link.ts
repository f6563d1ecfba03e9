// Trace ids as links to a trace viewer (Jaeger, Tempo, Grafana): `--trace-link-template` (or
// LEASEJOB_TRACE_LINK_TEMPLATE), an http(s) URL with `{traceId}` in it, turns the status page's
// trace ids into links, adds `traceUrl` to `history --json` and `trace_url` to the webhook.
import { UsageError } from '../errors.js';

const PLACEHOLDER = '{traceId}';

/** The template from the flag, else the environment; undefined when neither is set. Checked. */
export function traceLinkTemplate(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const text = (flag ?? (env.LEASEJOB_TRACE_LINK_TEMPLATE || undefined))?.trim();
  if (text === undefined || text === '') return undefined;
  let url: URL | undefined;
  try {
    url = new URL(text.replaceAll(PLACEHOLDER, '0'.repeat(32)));
  } catch {
    url = undefined;
  }
  if (!text.includes(PLACEHOLDER) || !url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new UsageError(
      `Expected \`--trace-link-template\` (or LEASEJOB_TRACE_LINK_TEMPLATE) to be an http(s) URL with ${PLACEHOLDER} ` +
        `in it, like https://tempo.example/trace/${PLACEHOLDER}, got \`${text}\`.`,
    );
  return text;
}

/** The link to a trace: the template with its id in place of each `{traceId}` (32 hex digits need no escaping). */
export function traceLink(template: string, traceId: string): string {
  return template.replaceAll(PLACEHOLDER, traceId);
}

let pageTemplate: string | undefined;

/** Set once by `exporter` for the status page it serves. */
export function useTraceLinks(template: string | undefined): void {
  pageTemplate = template;
}

/** The status page's link for a trace id, when a template was given. */
export function pageTraceLink(traceId: string): string | undefined {
  return pageTemplate === undefined ? undefined : traceLink(pageTemplate, traceId);
}
