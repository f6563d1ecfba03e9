// HTML escaping for the status page: one escaping function, and a tagged template that applies
// it to every interpolated value, so that no value reaches the page unescaped by omission.

/** Markup already escaped (or written by us): the only thing `markup` inserts as it is. */
export class SafeHtml {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/**
 * Text as HTML, safe both between tags and inside a quoted attribute value. Job names, window
 * keys, owners, hosts, reasons and event details are all user input: every one passes here.
 */
export function escapeHtml(value: string): string {
  return /[&<>"']/.test(value) ? value.replace(/[&<>"']/g, (c) => ENTITIES[c]!) : value;
}

export type HtmlValue = SafeHtml | string | number | boolean | null | undefined | readonly HtmlValue[];

function piece(v: HtmlValue): string {
  if (v instanceof SafeHtml) return v.text;
  if (v === null || v === undefined || v === false) return '';
  if (Array.isArray(v)) return v.map(piece).join('');
  return escapeHtml(String(v));
}

/**
 * markup`<td>${name}</td>`: every value escaped unless it is SafeHtml (another markup`` result);
 * arrays are joined. Not named `html`: Prettier reformats templates tagged `html` as HTML, and
 * would change the page's text (the whitespace in <pre>, between words).
 */
export function markup(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += piece(values[i]!) + strings[i + 1]!;
  return new SafeHtml(out);
}

/** Markup we wrote ourselves, with no values in it (the style sheet): taken as it is. */
export function trusted(markup: string): SafeHtml {
  return new SafeHtml(markup);
}
