// Text a child or a user wrote, made safe to print on an operator's terminal: control characters
// shown as escapes instead of acted on.

/**
 * C0 controls but tab and newline, DEL, C1 controls (U+0080-U+009F: U+009B is a CSI to some
 * terminals), and the bidirectional overrides and isolates that reorder what is shown.
 */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` with each control character (but newline and tab) written as `\x1b` or `\u202e`: an
 * escape sequence in a recorded output tail cannot move the cursor, retitle the window, clear
 * the screen or answer back through the terminal. Only for text output: JSON keeps the text exact.
 */
export function visibleControls(text: string): string {
  return text.replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
