// A minimal terminal: enough of ECMA-48 to replay what a command printed
// (text, \r \n \b \t, SGR colours, erase in line and display, cursor
// moves). Every other escape sequence is parsed and dropped, so recorded
// output can neither break the page nor hide itself behind an unknown code.
// The screen renders to text nodes in spans; it never builds markup.

const PLAIN = Object.freeze({ fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false });

/** xterm's 256-colour palette, entries 16..255, as "rgb(r,g,b)". */
function color256(n) {
  if (n < 232) {
    const i = n - 16;
    const v = (x) => (x === 0 ? 0 : 55 + x * 40);
    return `rgb(${v(Math.floor(i / 36))},${v(Math.floor(i / 6) % 6)},${v(i % 6)})`;
  }
  const g = 8 + (n - 232) * 10;
  return `rgb(${g},${g},${g})`;
}

export class Screen {
  constructor(cols, rows) {
    this.cols = Math.max(10, Math.min(cols || 80, 1000));
    this.rows = Math.max(2, Math.min(rows || 24, 500));
    this.reset();
  }

  reset() {
    this.lines = [[]];
    this.row = 0;
    this.col = 0;
    this.attr = PLAIN;
    this.state = 'ground';
    this.params = '';
    this.maxLines = 20000;
  }

  /** The first line of the visible screen (older lines are scrollback). */
  top() {
    return Math.max(0, this.lines.length - this.rows);
  }

  line(r) {
    while (this.lines.length <= r) this.lines.push([]);
    return this.lines[r];
  }

  newline() {
    this.row++;
    this.col = 0;
    this.line(this.row);
    if (this.lines.length > this.maxLines) {
      const drop = this.lines.length - this.maxLines;
      this.lines.splice(0, drop);
      this.row -= drop;
    }
  }

  put(ch) {
    if (this.col >= this.cols) this.newline();
    const l = this.line(this.row);
    while (l.length < this.col) l.push({ ch: ' ', attr: PLAIN });
    l[this.col] = { ch, attr: this.attr };
    this.col++;
  }

  feed(text) {
    for (const ch of text) {
      const c = ch.codePointAt(0);
      switch (this.state) {
        case 'ground':
          if (c === 0x1b) this.state = 'esc';
          else if (c === 0x0d) this.col = 0;
          else if (c === 0x0a || c === 0x0b || c === 0x0c) this.newline();
          else if (c === 0x08) this.col = Math.max(0, Math.min(this.col, this.cols) - 1);
          else if (c === 0x09) this.col = Math.min(this.cols - 1, (Math.floor(this.col / 8) + 1) * 8);
          else if (c === 0x9b) { this.state = 'csi'; this.params = ''; }
          else if (c < 0x20 || c === 0x7f || (c >= 0x80 && c < 0xa0)) { /* other controls: ignored */ }
          else this.put(ch);
          break;
        case 'esc':
          if (ch === '[') { this.state = 'csi'; this.params = ''; }
          else if (ch === ']' || ch === 'P' || ch === '_' || ch === '^' || ch === 'X') this.state = 'string';
          else if (ch === '(' || ch === ')' || ch === '*' || ch === '+' || ch === '#' || ch === '%') this.state = 'skip1';
          else if (ch === 'c') { this.reset(); }
          else if (ch === 'M') { this.row = Math.max(this.top(), this.row - 1); this.state = 'ground'; }
          else if (ch === 'D' || ch === 'E') { this.newline(); this.state = 'ground'; }
          else this.state = 'ground';
          if (this.state === 'esc') this.state = 'ground';
          break;
        case 'skip1':
          this.state = 'ground';
          break;
        case 'string':
          // OSC/DCS/APC/PM/SOS: until BEL or ST (ESC \).
          if (c === 0x07 || c === 0x9c) this.state = 'ground';
          else if (c === 0x1b) this.state = 'string_esc';
          break;
        case 'string_esc':
          this.state = ch === '\\' ? 'ground' : 'string';
          break;
        case 'csi':
          if (c >= 0x40 && c <= 0x7e) {
            this.state = 'ground';
            this.csi(ch, this.params);
          } else if (c >= 0x20 && c <= 0x3f && this.params.length < 64) {
            this.params += ch;
          } else if (c === 0x1b) {
            this.state = 'esc';
          } else if (c === 0x18 || c === 0x1a) {
            this.state = 'ground';
          }
          break;
        default:
          this.state = 'ground';
      }
    }
  }

  csi(final, raw) {
    if (/^[<=>?]/.test(raw) || /[ -/]/.test(raw)) return; // private modes and intermediates: ignored
    const p = raw.split(';').map((x) => (x === '' ? null : Number.parseInt(x.split(':')[0], 10)));
    const n = (i, d) => (p[i] === null || p[i] === undefined || Number.isNaN(p[i]) ? d : p[i]);
    switch (final) {
      case 'm': this.sgr(raw); break;
      case 'A': this.row = Math.max(this.top(), this.row - Math.max(1, n(0, 1))); break;
      case 'B': this.row = Math.min(this.top() + this.rows - 1, this.row + Math.max(1, n(0, 1))); this.line(this.row); break;
      case 'C': this.col = Math.min(this.cols - 1, this.col + Math.max(1, n(0, 1))); break;
      case 'D': this.col = Math.max(0, this.col - Math.max(1, n(0, 1))); break;
      case 'E': this.row = Math.min(this.top() + this.rows - 1, this.row + Math.max(1, n(0, 1))); this.col = 0; this.line(this.row); break;
      case 'F': this.row = Math.max(this.top(), this.row - Math.max(1, n(0, 1))); this.col = 0; break;
      case 'G': this.col = Math.min(this.cols - 1, Math.max(0, n(0, 1) - 1)); break;
      case 'H':
      case 'f': {
        const top = this.top();
        this.row = top + Math.min(this.rows - 1, Math.max(0, n(0, 1) - 1));
        this.col = Math.min(this.cols - 1, Math.max(0, n(1, 1) - 1));
        this.line(this.row);
        break;
      }
      case 'K': {
        const l = this.line(this.row);
        const mode = n(0, 0);
        if (mode === 0) l.length = Math.min(l.length, this.col);
        else if (mode === 1) for (let i = 0; i <= this.col && i < l.length; i++) l[i] = { ch: ' ', attr: PLAIN };
        else if (mode === 2) l.length = 0;
        break;
      }
      case 'J': {
        const mode = n(0, 0);
        if (mode === 0) {
          this.line(this.row).length = Math.min(this.line(this.row).length, this.col);
          this.lines.length = this.row + 1;
        } else if (mode === 1) {
          for (let r = this.top(); r < this.row; r++) this.lines[r] = [];
          const l = this.line(this.row);
          for (let i = 0; i <= this.col && i < l.length; i++) l[i] = { ch: ' ', attr: PLAIN };
        } else {
          // The visible screen is wiped; what scrolled off stays above.
          for (let r = this.top(); r < this.lines.length; r++) this.lines[r] = [];
        }
        break;
      }
      default: break; // everything else: ignored
    }
  }

  sgr(raw) {
    const p = raw === '' ? [0] : raw.split(/[;:]/).map((x) => (x === '' ? 0 : Number.parseInt(x, 10) || 0));
    const a = Object.assign({}, this.attr);
    for (let i = 0; i < p.length; i++) {
      const v = p[i];
      if (v === 0) Object.assign(a, PLAIN);
      else if (v === 1) a.bold = true;
      else if (v === 2) a.dim = true;
      else if (v === 3) a.italic = true;
      else if (v === 4) a.underline = true;
      else if (v === 7) a.inverse = true;
      else if (v === 22) { a.bold = false; a.dim = false; }
      else if (v === 23) a.italic = false;
      else if (v === 24) a.underline = false;
      else if (v === 27) a.inverse = false;
      else if (v >= 30 && v <= 37) a.fg = v - 30;
      else if (v === 39) a.fg = null;
      else if (v >= 40 && v <= 47) a.bg = v - 40;
      else if (v === 49) a.bg = null;
      else if (v >= 90 && v <= 97) a.fg = v - 90 + 8;
      else if (v >= 100 && v <= 107) a.bg = v - 100 + 8;
      else if (v === 38 || v === 48) {
        let color = null;
        if (p[i + 1] === 5 && i + 2 < p.length) {
          const k = Math.max(0, Math.min(255, p[i + 2]));
          color = k < 16 ? k : color256(k);
          i += 2;
        } else if (p[i + 1] === 2 && i + 4 < p.length) {
          const c = (x) => Math.max(0, Math.min(255, x));
          color = `rgb(${c(p[i + 2])},${c(p[i + 3])},${c(p[i + 4])})`;
          i += 4;
        } else {
          break;
        }
        if (v === 38) a.fg = color; else a.bg = color;
      }
    }
    this.attr = Object.freeze(a);
  }

  /** The screen as text (for tests and copying). */
  text() {
    return this.lines.map((l) => l.map((c) => c.ch).join('')).join('\n');
  }

  /** Renders into `pre` as spans of text, one per run of equal attributes. */
  render(pre) {
    const frag = document.createDocumentFragment();
    let last = this.lines.length;
    while (last > 1 && this.lines[last - 1].length === 0 && last - 1 > this.row) last--;
    for (let r = 0; r < last; r++) {
      const l = this.lines[r];
      let i = 0;
      while (i < l.length) {
        const attr = l[i].attr;
        let s = '';
        while (i < l.length && l[i].attr === attr) { s += l[i].ch; i++; }
        frag.appendChild(span(attr, s));
      }
      if (r < last - 1) frag.appendChild(document.createTextNode('\n'));
    }
    pre.replaceChildren(frag);
  }
}

function span(attr, text) {
  if (attr === PLAIN) return document.createTextNode(text);
  const el = document.createElement('span');
  let fg = attr.fg;
  let bg = attr.bg;
  if (attr.inverse) {
    fg = attr.bg === null ? 'dbg' : attr.bg;
    bg = attr.fg === null ? 'dfg' : attr.fg;
  }
  const cls = [];
  if (typeof fg === 'number' || fg === 'dbg') cls.push(`fg-${fg}`);
  else if (typeof fg === 'string') el.style.color = fg;
  if (typeof bg === 'number' || bg === 'dfg') cls.push(`bg-${bg}`);
  else if (typeof bg === 'string') el.style.backgroundColor = bg;
  if (attr.bold) cls.push('t-bold');
  if (attr.dim) cls.push('t-dim');
  if (attr.italic) cls.push('t-italic');
  if (attr.underline) cls.push('t-underline');
  if (cls.length) el.className = cls.join(' ');
  el.textContent = text;
  return el;
}
