// visibleControls: what `history` prints of a recorded output tail.
import { describe, expect, it } from 'vitest';
import { visibleControls } from '../../src/cli/terminal-text.js';

describe('visibleControls', () => {
  it('keeps text, newlines and tabs; shows C0, DEL, C1 and bidi controls as escapes', () => {
    expect(visibleControls('plain text, ünïcödé ✓\n\tindented')).toBe('plain text, ünïcödé ✓\n\tindented');
    expect(visibleControls('\x1b[31mred\x1b[0m\r\x00\x7f')).toBe('\\x1b[31mred\\x1b[0m\\x0d\\x00\\x7f');
    expect(visibleControls('\u009b2J \u202eevil\u2069')).toBe('\\x9b2J \\u202eevil\\u2069');
  });
});
