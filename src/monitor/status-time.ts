// How the status pages write instants: UTC, or the reader's zone when asked (`?tz=Europe/Paris`),
// with how long ago on the database clock; and the links that keep that zone from page to page.
import { DateTime, Info } from 'luxon';
import { markup, type SafeHtml } from './status-html.js';
import { humanMs } from './table.js';

/**
 * The zone of the page being rendered. A page is rendered synchronously from data already read,
 * so one render never interleaves with another: set for the render by `inZone`, then cleared.
 */
let zone: string | undefined;

/** A valid IANA zone from the query (`tz`), else undefined (UTC). Leniently: a page asks, it is not a command line. */
export function zoneParam(params: URLSearchParams): string | undefined {
  const tz = params.get('tz')?.trim() ?? '';
  if (tz === '' || tz.length > 64 || tz.toUpperCase() === 'UTC') return undefined;
  return Info.isValidIANAZone(tz) ? tz : undefined;
}

/** Renders `render()` with instants in `tz` (undefined: UTC). */
export function inZone<T>(tz: string | undefined, render: () => T): T {
  zone = tz;
  try {
    return render();
  } finally {
    zone = undefined;
  }
}

/** The zone the page is rendered in, for its header: `UTC` when none was asked for. */
export const pageZone = (): string => zone ?? 'UTC';

export const iso = (d: Date): string => d.toISOString();

/** `2026-12-01 20:05:00Z`, or in the asked zone `2026-12-01 21:05:00 CET`: the instant on one line, seconds kept. */
export function shortIso(d: Date): string {
  if (zone === undefined) return `${d.toISOString().slice(0, 19).replace('T', ' ')}Z`;
  return DateTime.fromJSDate(d, { zone }).toFormat('yyyy-MM-dd HH:mm:ss ZZZZ');
}

/** With milliseconds, for an event's two clocks side by side. */
export function preciseIso(d: Date): string {
  if (zone === undefined) return `${d.toISOString().slice(0, 23).replace('T', ' ')}Z`;
  return DateTime.fromJSDate(d, { zone }).toFormat('yyyy-MM-dd HH:mm:ss.SSS ZZZZ');
}

/** How long ago (or ahead) `d` is on the database clock: `3m ago`, `in 2h`, `now`. */
export function relative(d: Date, now: Date): string {
  const ms = d.getTime() - now.getTime();
  return Math.abs(ms) < 1000 ? 'now' : ms < 0 ? `${humanMs(-ms)} ago` : `in ${humanMs(ms)}`;
}

/** An instant with how long ago (or ahead) it is on the database clock. */
export function when(d: Date | null | undefined, now: Date): SafeHtml {
  if (!d) return markup`<span class="muted">-</span>`;
  return markup`<time datetime="${iso(d)}">${shortIso(d)}</time> <span class="muted">(${relative(d, now)})</span>`;
}

/** `href` with the page's zone kept (`tz=`), when one was asked for. */
export function zoned(href: string): string {
  if (zone === undefined) return href;
  return `${href}${href.includes('?') ? '&' : '?'}tz=${encodeURIComponent(zone)}`;
}

/** A column's start as the grid's axis labels it: `22:00`, `Dec 7 21:00` for 3-hour columns, `Dec 7` for days. */
export function columnLabel(d: Date, stepMs: number): string {
  const t = DateTime.fromJSDate(d, { zone: zone ?? 'UTC' });
  if (stepMs >= 86_400_000) return t.toFormat('LLL d');
  if (stepMs >= 10_800_000) return t.toFormat('LLL d HH:mm');
  return t.toFormat('HH:mm');
}

/** A column's span, for its cell's title and text: `2026-12-07 22:00–23:00 UTC`. */
export function columnSpan(d: Date, stepMs: number): string {
  const a = DateTime.fromJSDate(d, { zone: zone ?? 'UTC' });
  const b = a.plus({ milliseconds: stepMs });
  const day = a.toFormat('yyyy-MM-dd');
  const end = b.toFormat('yyyy-MM-dd') === day ? b.toFormat('HH:mm') : b.toFormat('yyyy-MM-dd HH:mm');
  return `${day} ${a.toFormat('HH:mm')}–${end} ${pageZone()}`;
}

/** `3h12m`: the two largest units of a span, for a narrow cell (the title has the instant). */
function roughMs(ms: number): string {
  const units: Array<[string, number]> = [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ];
  const i = Math.max(
    0,
    units.findIndex(([, u]) => ms >= u),
  );
  const [a, ua] = units[i]!;
  const first = Math.floor(ms / ua);
  const next = units[i + 1];
  const second = next ? Math.floor((ms - first * ua) / next[1]) : 0;
  return `${first}${a}${second && next ? `${second}${next[0]}` : ''}`;
}

/** `3m ago` (or `in 2h5m`) with the instant itself as its title: a list's cell, one line. */
export function ago(d: Date | null | undefined, now: Date): SafeHtml {
  if (!d) return markup`<span class="muted">-</span>`;
  const ms = d.getTime() - now.getTime();
  const text = Math.abs(ms) < 1000 ? 'now' : ms < 0 ? `${roughMs(-ms)} ago` : `in ${roughMs(ms)}`;
  return markup`<time datetime="${iso(d)}" title="${shortIso(d)}">${text}</time>`;
}
