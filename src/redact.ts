// Remote error text. A CRM, the telephony API, an SMTP server or S3 often echoes what we sent it
// (numbers, names, summary sentences) in its error answer, and that text becomes an error message,
// then a log line and a dead letter's reason. Every remote text passes `redactRemoteText` where it
// enters (errorFromHttp in src/errors.ts, the CRM client, the telephony and OAuth errors, the SMTP and
// S3 errors); the delivery of a call then also removes that call's own texts (`scrubEchoes`,
// workers/deliver.ts). Imports nothing.

/**
 * Characters of a remote's text kept in a message: the first 239 and the last 60 beyond that. Room
 * for the vendor's code after an echo of our data, which the delivery removes afterwards.
 * @internal Exported for its tests only (test/redaction.redis.test.ts).
 */
export const MAX_REMOTE_TEXT = 300;
/** Characters of a remote's text looked at, from its beginning and from its end (the rest is cut unread). */
const SCAN_HEAD = 8192;
const SCAN_TAIL = 2048;
const REMOTE_TEXT_TAIL = 60;

/** A digit run needs this many digits to count as a possible phone number. */
const MIN_PHONE_DIGITS = 7;

/**
 * `+4915112345678` -> `+****678`; shorter runs keep 2 digits (`6355340` -> `****40`). Unlike
 * maskPhone (src/log.ts, numbers callsync knows are numbers) it keeps no leading digits: in free
 * text a digit run may be anything, and its head plus tail could be all of it.
 */
function maskDigitRun(run: string): string {
  const digits = run.replace(/\D/g, '');
  const plus = run.trimStart().startsWith('+') ? '+' : '';
  return `${plus}****${digits.slice(digits.length >= 9 ? -3 : -2)}`;
}

/** Not glued to digits before it: no digit, `+` or `)` right before, nor one and a separator. */
const ALONE_BEFORE = String.raw`(?<![\d+)]|[\d+)][\-./ ])`;
const DATE = String.raw`(?:19|20|21)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])`;
const TIME = String.raw`[T ](?:[01]\d|2[0-3]):[0-5]\d(?::(?:[0-5]\d|60)(?:[.,]\d{1,9})?)?(?:Z|[+-](?:[01]\d|2[0-3]):?[0-5]\d)?`;
const OCTET = String.raw`(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)`;

/**
 * Kept as they are, when nothing glues them to more digits (`0176-12-24-98-76` is a number, not a
 * date): ISO dates with a valid month and day (years 1900–2199), alone or with a valid time
 * (`2026-12-06T13:17:41Z`, `2026-04-08 10:03`); IPv4 addresses (octets up to 255, a port);
 * UUIDs (with the version and variant nibbles of RFC 9562); hex ids of 24–64 characters with a
 * letter among them (hashes, object ids). Everything else with 7 or more digits is masked.
 */
const KEPT = new RegExp(
  [
    String.raw`${ALONE_BEFORE}${DATE}(?:${TIME}(?![\d+]|[\-./]\d)|(?![\d+]|[\-./ ]\d))`,
    String.raw`${ALONE_BEFORE}(?:${OCTET}\.){3}${OCTET}(?::\d{1,5})?(?!\d|[\-./ ]\d)`,
    String.raw`(?<![\p{L}\p{N}_])[\da-f]{8}-[\da-f]{4}-[1-8][\da-f]{3}-[89ab][\da-f]{3}-[\da-f]{12}(?![\p{L}\p{N}_])`,
    String.raw`(?<![\p{L}\p{N}_])(?=[\da-f]*[a-f])[\da-f]{24,64}(?![\p{L}\p{N}_])`,
  ].join('|'),
  'giu',
);

/**
 * A run of digits as a phone number is written: a leading `+` or `(`, then digits with spaces, `-`,
 * `.`, `/`, parentheses or `+` between them (a form-encoded space: `%2B49+176+1234+9876`), `_`,
 * the spaces of typesetting (no-break, thin, figure, zero-width), a middle dot, a comma before three
 * digits (`492,116,355,340`: a number a remote formatted for its locale) and a no-break space as an
 * HTML entity (`&nbsp;`, `&#160;`: a remote quoting its HTML). Whatever stands before or after it
 * (`Nr.0176…`, `phone_49176…`, `…876.Check`, `…876s`): a run of 7 or more digits is masked.
 */
const DIGIT_RUN =
  /\+?\(?\d(?:(?:[\d ()\-./+_\u00a0\u00b7\u2007\u2009\u200a\u200b\u202f]|,(?=\d{3}(?!\d))|&nbsp;|&#160;|&#x[aA]0;)*\d)?/g;

/** Characters that NFKC turns into digits or a number's separators (full-width `０１７６`, `＋`). */
const DIGIT_LIKE = /\P{ASCII}/gu;
const DECIMAL_DIGIT = /^\p{Nd}$/u;

/**
 * The value of a decimal digit of any script (`٧` Arabic-Indic, `۷` Persian, `७` Devanagari, `７`
 * full-width: 7). Unicode encodes each script's digits as one run of ten, 0 to 9, so the value is
 * the distance from the run's first digit (runs that follow each other directly, as the
 * mathematical digits do, are ten apart). Null for anything else.
 */
function digitValue(c: string): string | null {
  if (!DECIMAL_DIGIT.test(c)) return null;
  const cp = c.codePointAt(0)!;
  let first = cp;
  while (DECIMAL_DIGIT.test(String.fromCodePoint(first - 1))) first--;
  return String((cp - first) % 10);
}

/**
 * Invisible format characters (Unicode Cf: the bidi marks and isolates right-to-left text puts
 * around and inside numbers, zero-width spaces and joiners, soft hyphens) next to a digit or a `+`.
 */
const INVISIBLE_BESIDE_DIGIT = /(?<=[\d+])\p{Cf}+|\p{Cf}+(?=[\d+])/gu;

/**
 * Decimal digits of every script (Arabic-Indic `٠١٧٠…` as Arabic phones send them, Persian,
 * Devanagari, full-width `０１７６`) and the compatibility forms of `+ - ( ) . /` as ASCII (NFKC, per
 * character), and without the invisible format characters beside them (`\u200e+49\u200e170…`
 * copied from right-to-left text): the rest of the text, `…` included, stays as it is.
 */
export function asciiDigits(text: string): string {
  if (!/\P{ASCII}/u.test(text)) return text;
  return text
    .replace(DIGIT_LIKE, (c) => {
      const digit = digitValue(c);
      if (digit !== null) return digit;
      const n = c.normalize('NFKC');
      return n !== c && (/^[+\-()./]$/.test(n) || /^[\d+\-()./]*\d[\d+\-()./]*$/.test(n)) ? n : c;
    })
    .replace(INVISIBLE_BESIDE_DIGIT, '');
}

/** Percent-escaped bytes (`%20`, `%2B49`, `%C3%BC`), a run of them at a time. */
const PERCENT_ESCAPED = /(?:%[\da-fA-F]{2})+/g;
/** Rounds of decoding: a text escaped twice (`%252B49`) is read too, and decoding stays bounded. */
const PERCENT_ROUNDS = 3;
const utf8 = new TextDecoder();

/**
 * A remote's text with its percent-escapes decoded (`Reach%20me%20at%20%2B49%20176` -> `Reach me at
 * +49 176`): an API that echoes a form or a URL it was sent writes the call's words and numbers so,
 * and escaped, a number was runs of 2 to 6 digits (under the 7 that are masked) and a sentence one
 * word (`20secret`) that no echo matched. Bytes that are no UTF-8 become U+FFFD.
 */
function decodePercent(text: string): string {
  let out = text;
  for (let round = 0; round < PERCENT_ROUNDS && out.includes('%'); round++) {
    const next = out.replace(PERCENT_ESCAPED, (run) =>
      utf8.decode(Uint8Array.from(run.slice(1).split('%'), (hex) => parseInt(hex, 16))),
    );
    if (next === out) break;
    out = next;
  }
  return out;
}

// The local part bounded (RFC 5321: 64 at most): unbounded, a long run of its characters without an
// `@` was scanned to its end from each of its positions (80 KB of `1-1-1-…` took 4 s).
const EMAIL = /[\w.%+-]{1,64}@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)/g;
const QUERY_VALUE = /([?&][\w.\-[\]]+=)[^&\s"'<>#]+/g;
const CREDENTIAL = /\b(Bearer|Basic|Token)\s+[\w\-.~+/=*]{16,}/gi;

/**
 * Masks the digit runs that may be phone numbers (every run of 7 or more digits, see DIGIT_RUN), keeps
 * the rest of the text and what KEPT names. Full-width digits are read as digits.
 */
export function maskDigitRuns(text: string): string {
  const ascii = asciiDigits(text);
  let out = '';
  let at = 0;
  for (const kept of ascii.matchAll(KEPT)) {
    out += maskRuns(ascii.slice(at, kept.index)) + kept[0];
    at = kept.index + kept[0].length;
  }
  return out + maskRuns(ascii.slice(at));
}

function maskRuns(text: string): string {
  return text.replace(DIGIT_RUN, (run) =>
    run.replace(/\D/g, '').length >= MIN_PHONE_DIGITS ? maskDigitRun(run) : run,
  );
}

/**
 * Cuts a text to `max` characters: its beginning and its end (where vendors put a code or category).
 * @internal Exported for its tests only (test/layers.test.ts, test/redaction.redis.test.ts).
 */
export function clipText(text: string, max: number = MAX_REMOTE_TEXT): string {
  if (text.length <= max) return text;
  const tail = Math.min(REMOTE_TEXT_TAIL, Math.max(0, max - 1));
  const head = max - 1 - tail;
  return `${text.slice(0, head)}…${tail > 0 ? text.slice(-tail) : ''}`;
}

/**
 * The secrets this process was configured with (src/config: the values of variables and sink
 * options named as credentials, URL passwords), at least MIN_SECRET characters each: a remote that
 * quotes one back (`invalid token pat-na1-<uuid>`: a UUID the masking keeps as an id; a 40-hex API
 * token; a short Basic credential) has it replaced by `[redacted]` in its text, whatever its shape.
 */
const knownSecrets = new Set<string>();
const MIN_SECRET = 8;

/** Adds values to the secrets no remote text keeps (redactRemoteText). */
export function rememberSecrets(values: Iterable<string | undefined>): void {
  for (const value of values) {
    const secret = value?.trim();
    if (secret !== undefined && secret.length >= MIN_SECRET) knownSecrets.add(secret);
  }
}

/** `text` with every secret rememberSecrets was given (also percent-encoded) as `[redacted]`. */
function withoutKnownSecrets(text: string): string {
  let out = text;
  for (const secret of knownSecrets)
    for (const form of [secret, encodeURIComponent(secret)])
      if (out.includes(form)) out = out.split(form).join('[redacted]');
  return out;
}

/**
 * A remote's error text made fit for logs and dead letters: the process' secrets out (rememberSecrets),
 * percent-escapes decoded, on one line,
 * phone-number-like digit runs masked (`+****678`), e-mail addresses masked (`***@example.com`), query-string values and
 * bearer-like credentials replaced by `…`, cut to MAX_REMOTE_TEXT (300) characters. What an operator
 * needs stays: the vendor's words, error codes and categories, field names, dates. Idempotent.
 */
export function redactRemoteText(text: string, max: number = MAX_REMOTE_TEXT): string {
  // Only the head and the end of a long text are looked at — far more than the clip keeps of them:
  // a remote's answer may be megabytes, and the patterns below need not run through it whole.
  const scanned =
    text.length > SCAN_HEAD + SCAN_TAIL ? `${text.slice(0, SCAN_HEAD)} … ${text.slice(-SCAN_TAIL)}` : text;
  // Tags out (bounded, as an unclosed `<` must not scan to the end): a remote marking up what it
  // quotes split a number into runs too short to be masked (`+49 211 <b>635</b> 53 40`). Only a tag
  // name then attributes or `>`: an address in brackets (`<jane@example.com>`, `<https://…>`) stays.
  const oneLine = withoutKnownSecrets(decodePercent(withoutKnownSecrets(scanned)))
    .replace(/<\/?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]{0,200})?\/?>/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  // Digit runs are masked before query values and credentials are cut: a number that begins in a
  // query value and goes on after a space (`&to=01512 34567 8`) was masked only up to the space,
  // and the rest (`34567 8`) was too short to be taken for a number. A masked credential keeps its
  // length (`*` is in CREDENTIAL's characters), so it is still cut whole.
  const masked = maskDigitRuns(oneLine.replace(EMAIL, (_m, domain: string) => `***@${domain}`))
    .replace(QUERY_VALUE, '$1…')
    .replace(CREDENTIAL, '$1 …');
  return clipText(masked, max);
}

/** What a call itself holds that must not come back in an error text (see workers/deliver.ts). */
export interface EchoValues {
  /** Free texts (summary, key points, transcript): any run of 4 of their words in a row is removed. */
  texts?: Iterable<string>;
  /** Names: each of their words is removed wherever it stands. */
  names?: Iterable<string>;
  /**
   * Phone numbers, each in every spelling to find (numberSpellings, src/model/phone.ts: E.164 and
   * national): found with any separators between their digits and a leading `+` or `00`
   * (numberPattern), and masked like any digit run.
   */
  numbers?: Iterable<string>;
}

/**
 * Between two digits of a number as it is written: up to 5 (`0176  –  1234`) of space, `-`, `_`,
 * `(`, `)`, `.`, `/`, `+` (a form-encoded space), and the typographic dashes (U+2010–U+2015: hyphen, non-breaking hyphen, figure, en and em dash;
 * U+2212 minus) word processors and speech-to-text write for `-`.
 */
const NUMBER_SEPARATOR = String.raw`[\s\-_().\/+\u2010-\u2015\u2212]{0,5}`;
/** A number of fewer digits is found only as its digits exactly (an extension, not a phone number). */
const SPACED_DIGITS = 7;
/**
 * A number of more digits is not looked for: no phone number is that long (E.164 has at most 15,
 * with a trunk 0 and an extension far fewer than this), and each digit is a piece of the pattern —
 * a sender's `from` of 20,000 digits made one V8 cannot compile, thrown from every delivery of the
 * call. Such a run is still masked wherever a text passes maskDigitRuns (every run of 7 or more).
 */
const MAX_NUMBER_DIGITS = 32;

/**
 * A pattern finding the given numbers in a text, whatever surrounds them but a digit: each with a
 * leading `+` or `00` or none, and, from 7 digits on, up to 5 separators between any two of its
 * digits (`+49 (176) 1234-9876`, `0176 / 12 34 98 76`). Null when no number has 3 to 32 digits. Used by
 * scrubEchoes and numberFinder (`callsync forget`) to find a number in any spelling.
 * @internal Exported for its tests only (test/redact.test.ts).
 */
export function numberPattern(numbers: Iterable<string>, flags = 'g'): RegExp | null {
  const forms = new Set<string>();
  for (const n of numbers) {
    const digits = n.replace(/\D/g, '');
    if (digits.length >= 3 && digits.length <= MAX_NUMBER_DIGITS) forms.add(digits);
  }
  if (forms.size === 0) return null;
  const spelled = [...forms]
    .sort((a, b) => b.length - a.length)
    .map((d) => (d.length >= SPACED_DIGITS ? d.split('').join(NUMBER_SEPARATOR) : d));
  return new RegExp(String.raw`(?<!\d)(?:(?:\+|00)${NUMBER_SEPARATOR})?(?:${spelled.join('|')})(?!\d)`, flags);
}

/**
 * Whether a text holds one of the given numbers (numberPattern), the digits of any script read as
 * digits (asciiDigits), also escaped as a field kept verbatim may hold it — percent-escaped in a
 * link (`?q=%2B49%20170%20…`), JSON-escaped (`\u0660…`), as HTML character references
 * (decodeEscapes) — and spoken, written as digit words (`zero one seven zero, one two three …`,
 * spokenDigitRuns); null when no number can be looked for. `callsync forget` finds a caller so.
 */
export function numberFinder(numbers: Iterable<string>): ((text: string) => boolean) | null {
  const re = numberPattern(numbers, '');
  if (re === null) return null;
  const holds = (text: string) => re.test(text) || spokenDigitRuns(text).some((run) => re.test(run));
  return (text) => holds(asciiDigits(text)) || (/[%\\&]/.test(text) && holds(asciiDigits(decodeEscapes(text))));
}

/**
 * Number words as speech-to-text writes a number read out, in English and German (lower case, NFC):
 * digit by digit (`zero one seven zero`), in pairs and groups (`twelve thirty-four`, `fifteen
 * hundred`, `zwölf vierunddreißig`, `dreihundertzwölf`), `double`/`triple`/`doppel` before a digit.
 */
const UNITS: Record<string, number> = {
  zero: 0,
  oh: 0,
  o: 0,
  one: 1,
  two: 2,
  three: 3,
  four: 4,
  five: 5,
  six: 6,
  seven: 7,
  eight: 8,
  nine: 9,
  null: 0,
  eins: 1,
  ein: 1,
  zwei: 2,
  zwo: 2,
  drei: 3,
  vier: 4,
  fünf: 5,
  fuenf: 5,
  sechs: 6,
  sieben: 7,
  acht: 8,
  neun: 9,
};
const TEENS: Record<string, number> = {
  ten: 10,
  eleven: 11,
  twelve: 12,
  thirteen: 13,
  fourteen: 14,
  fifteen: 15,
  sixteen: 16,
  seventeen: 17,
  eighteen: 18,
  nineteen: 19,
  zehn: 10,
  elf: 11,
  zwölf: 12,
  zwoelf: 12,
  dreizehn: 13,
  vierzehn: 14,
  fünfzehn: 15,
  fuenfzehn: 15,
  sechzehn: 16,
  siebzehn: 17,
  achtzehn: 18,
  neunzehn: 19,
};
const TENS: Record<string, number> = {
  twenty: 20,
  thirty: 30,
  forty: 40,
  fifty: 50,
  sixty: 60,
  seventy: 70,
  eighty: 80,
  ninety: 90,
  zwanzig: 20,
  dreißig: 30,
  dreissig: 30,
  vierzig: 40,
  fünfzig: 50,
  fuenfzig: 50,
  sechzig: 60,
  siebzig: 70,
  achtzig: 80,
  neunzig: 90,
};
/** `double seven`, `triple zero`, `doppel null` (also `doppelnull`): the next digit word that many times. */
const REPEATS: Record<string, number> = { double: 2, triple: 3, doppel: 2 };
/** Units of a German compound (`einundzwanzig`, `dreihundert`): not `eins`, `zwo` or `null`. */
const GERMAN_UNITS = ['ein', 'zwei', 'drei', 'vier', 'fünf', 'fuenf', 'sechs', 'sieben', 'acht', 'neun'];
/** A unit word that is also prose (`one moment`, `oh well`, `ein Moment`): see spokenDigitRuns. */
const AMBIGUOUS = new Set(['one', 'o', 'oh', 'ein']);

const LETTER = String.raw`\p{L}\p{M}`;
/** Words as a pattern, longest first; `ü`, `ö` also decomposed (`u`, `o` and U+0308), `ß` also `ss`. */
const wordsPattern = (words: string[]) =>
  [...words]
    .sort((a, b) => b.length - a.length)
    .map((w) => w.replace(/ü/g, '(?:ü|u\u0308)').replace(/ö/g, '(?:ö|o\u0308)'))
    .join('|');
const GERMAN_UNIT = `(?:${wordsPattern(GERMAN_UNITS)})`;
const GERMAN_99 = `(?:${GERMAN_UNIT}und(?:${wordsPattern(Object.keys(TENS))})|${wordsPattern([...Object.keys(TEENS), ...Object.keys(TENS)])}|${GERMAN_UNIT})`;
const GERMAN_999 = `(?:${GERMAN_UNIT}?hundert(?:und)?${GERMAN_99}?|${GERMAN_99})`;
/** A German cardinal written as one word (`vierunddreißig`, `zweitausendfünfhundert`); bounded, no repetition. */
const GERMAN_WORD = `(?:${GERMAN_999}?tausend(?:und)?${GERMAN_999}?|${GERMAN_999})`;
/** A number word, whole (`one`, not the end of `phone`). */
const SPOKEN_WORD = String.raw`(?:${wordsPattern([
  ...Object.keys(UNITS),
  ...Object.keys(TEENS),
  ...Object.keys(TENS),
  'hundred',
  'thousand',
  'and',
  'und',
])}|${GERMAN_WORD})(?![${LETTER}])`;
/** One piece of a spoken number: a number word, maybe repeated (`double seven`), or digits (`0170 one two …`). */
const SPOKEN_TOKEN = String.raw`(?:(?:${Object.keys(REPEATS).join('|')})[\s\-]{0,3})?${SPOKEN_WORD}|\d+`;
/** Between two pieces: spaces, commas, hyphens and dashes, dots, slashes, brackets (at most 5). */
const SPOKEN_SEPARATOR = String.raw`[\s,;.\-/()\u2010-\u2015\u2212]{1,5}`;
/**
 * A run of number words and digits, `plus` or `+` before it. The pieces and separators share no
 * character and each word must end where a letter does not follow, so a run is matched in one pass
 * with no backtracking beyond a separator and a bounded amount within one word: linear in the text
 * (a multi-MB transcript of number words).
 */
const SPOKEN_RUN = new RegExp(
  String.raw`(?<![${LETTER}\d])(?:(?:plus(?![${LETTER}])|\+)\s{0,3})?(?:${SPOKEN_TOKEN})(?:${SPOKEN_SEPARATOR}(?:${SPOKEN_TOKEN}))*`,
  'giu',
);
/** The pieces of a run matched by SPOKEN_RUN: digits, `+`, a word, what lies between. */
const SPOKEN_PART = new RegExp(String.raw`(\d+)|(\+)|([${LETTER}]+)|([^${LETTER}\d+]+)`, 'gu');
/** A pause in a spoken number (`zero one seven zero, one two …`): its groups are kept apart by a space. */
const SPOKEN_PAUSE = /[,;.\n\r]/;

/** A piece of a run, read. */
type Atom =
  | { kind: 'unit'; value: number; word: string }
  | { kind: 'teen' | 'tens' | 'whole'; value: number }
  | { kind: 'hundred' | 'thousand' | 'and' | 'und' | 'plus' | 'pause' }
  | { kind: 'repeat'; times: number }
  | { kind: 'digits'; text: string };

/** A German cardinal in one word (`dreihundertzwölf`: 312); null when the word is none. */
function germanNumber(word: string): number | null {
  const thousand = word.indexOf('tausend');
  if (thousand >= 0) {
    const left = word.slice(0, thousand);
    const right = word.slice(thousand + 7).replace(/^und/, '');
    const times = left === '' ? 1 : germanBelow1000(left);
    const rest = right === '' ? 0 : germanBelow1000(right);
    return times === null || times === 0 || rest === null ? null : times * 1000 + rest;
  }
  return germanBelow1000(word);
}
function germanBelow1000(word: string): number | null {
  const hundred = word.indexOf('hundert');
  if (hundred < 0) return germanBelow100(word);
  const left = word.slice(0, hundred);
  const right = word.slice(hundred + 7).replace(/^und/, '');
  const times = left === '' ? 1 : GERMAN_UNITS.includes(left) ? UNITS[left]! : null;
  const rest = right === '' ? 0 : germanBelow100(right);
  return times === null || rest === null ? null : times * 100 + rest;
}
function germanBelow100(word: string): number | null {
  const single =
    TEENS[word] ?? TENS[word] ?? (GERMAN_UNITS.includes(word) || word === 'eins' ? UNITS[word] : undefined);
  if (single !== undefined) return single;
  const und = word.indexOf('und');
  if (und <= 0) return null;
  const unit = word.slice(0, und);
  const tens = TENS[word.slice(und + 3)];
  return GERMAN_UNITS.includes(unit) && tens !== undefined ? UNITS[unit]! + tens : null;
}

/** A word of a run, read; null when it is no number word (it ends the run). */
function readWord(word: string): Atom | null {
  const w = word.toLowerCase().normalize('NFC');
  const unit = UNITS[w];
  if (unit !== undefined) return { kind: 'unit', value: unit, word: w };
  const teen = TEENS[w];
  if (teen !== undefined) return { kind: 'teen', value: teen };
  const tens = TENS[w];
  if (tens !== undefined) return { kind: 'tens', value: tens };
  if (w === 'hundred' || w === 'hundert') return { kind: 'hundred' };
  if (w === 'thousand' || w === 'tausend') return { kind: 'thousand' };
  if (w === 'and' || w === 'und') return { kind: w };
  if (w === 'plus') return { kind: 'plus' };
  const times = REPEATS[w];
  if (times !== undefined) return { kind: 'repeat', times };
  const whole = germanNumber(w);
  return whole === null ? null : { kind: 'whole', value: whole };
}

/** Spaces, then a letter: a word right after a run (`… one moment`). */
const WORD_AFTER = new RegExp(String.raw`^[ \t]{1,5}[${LETTER}]`, 'u');

/** A run read: its digits (`+`, a space for a pause), whether a word was in it, where its last piece began. */
interface Run {
  run: string;
  spoken: boolean;
  /** Where the run stood before its last piece, when that piece is a lone `one`, `oh`/`o` or `ein`; else -1. */
  lastAmbiguous: number;
}

/**
 * The digits of a run's atoms: a digit word one digit, a number said in words (`twenty-three`,
 * `fifteen hundred`, `one hundred and five`, `vierunddreißig`, `vier und dreißig`) its digits,
 * `double`/`triple` before a digit word that digit so many times, `+` for `plus`, a space for a
 * pause. An atom that cannot stand where it is (`and` outside a number, `double` before no digit
 * word) ends a run as a word that is no number does: `end` is called for each run, with whether a
 * word came right after it.
 */
function readAtoms(atoms: Atom[], end: (run: Run, wordAfter: boolean) => void): void {
  let current: Run = { run: '', spoken: false, lastAmbiguous: -1 };
  let i = 0;
  const at = (k: number) => atoms[k];
  /** 1–99 from i on (`twenty`, `twenty three`, `seventeen`, `seven`, `vier und zwanzig`); null if none. */
  const below100 = (): number | null => {
    const a = at(i);
    if (a === undefined) return null;
    if (a.kind === 'tens') {
      i++;
      const next = at(i);
      if (next?.kind === 'unit' && next.value > 0) {
        i++;
        return a.value + next.value;
      }
      return a.value;
    }
    if (a.kind === 'teen' || a.kind === 'whole') {
      i++;
      return a.value;
    }
    if (a.kind === 'unit') {
      i++;
      const tens = at(i + 1);
      if (at(i)?.kind === 'und' && tens?.kind === 'tens') {
        i += 2;
        return a.value + tens.value;
      }
      return a.value;
    }
    return null;
  };
  /**
   * After `hundred` or `thousand`: what is below the multiplier, if said; 0 if not. A digit word
   * right after it is the next digit, not part of the number (`eight hundred, five five five …`
   * is 800 555 …), unless `and` comes between (`three hundred and five`) or `hundred` after it
   * (`two thousand five hundred`); a teen or a tens word goes on with it (`nineteen hundred
   * eighty-four`).
   */
  const rest = (below: () => number | null, hundreds: boolean): number => {
    const start = i;
    const and = at(i)?.kind === 'and' || at(i)?.kind === 'und';
    if (and) i++;
    const next = at(i);
    if (next?.kind === 'unit' && !and && !(hundreds && at(i + 1)?.kind === 'hundred')) return 0;
    const value = next?.kind === 'unit' && next.value === 0 ? null : below();
    if (value === null) i = start;
    return value ?? 0;
  };
  /** A number said with `hundred` (`thousand`) or without: `below` times `factor`, and what is below it. */
  const times = (below: () => number | null, factor: 100 | 1000): number | null => {
    const multiplier = factor === 100 ? 'hundred' : 'thousand';
    if (at(i)?.kind === multiplier) {
      i++;
      return factor + rest(below, factor === 1000);
    }
    const value = below();
    if (value === null || value >= factor || at(i)?.kind !== multiplier) return value;
    i++;
    return value * factor + rest(below, factor === 1000);
  };
  const below1000 = () => times(below100, 100);
  const cardinal = () => times(below1000, 1000);
  while (i < atoms.length) {
    const a = atoms[i]!;
    const before = current.run.length;
    current.lastAmbiguous = -1;
    if (a.kind === 'digits') {
      current.run += a.text;
      i++;
    } else if (a.kind === 'plus') {
      current.run += '+';
      i++;
    } else if (a.kind === 'pause') {
      current.run += ' ';
      i++;
    } else if (a.kind === 'repeat' && at(i + 1)?.kind === 'unit') {
      current.run += String((at(i + 1) as { value: number }).value).repeat(a.times);
      current.spoken = true;
      i += 2;
    } else if (a.kind === 'unit' && a.value === 0) {
      // A zero is a digit of its own (`oh one`, `zero five hundred`), never the start of a number.
      current.run += '0';
      current.spoken = true;
      i++;
      if (AMBIGUOUS.has(a.word)) current.lastAmbiguous = before;
    } else {
      const start = i;
      const value = cardinal();
      if (value === null) {
        // `and`, `und`, `double` where no number has them: the run ends before the word.
        end(current, true);
        current = { run: '', spoken: false, lastAmbiguous: -1 };
        i++;
        continue;
      }
      current.run += String(value);
      current.spoken = true;
      if (a.kind === 'unit' && i === start + 1 && AMBIGUOUS.has(a.word)) current.lastAmbiguous = before;
    }
  }
  end(current, false);
}

/**
 * The runs of number words in a text (`my number is zero one seven zero, one two three four …`,
 * `plus four nine one seven zero double one …`, `oh one five one, twelve thirty-four fifty-six`,
 * `null eins sieben null …`, `null eins fünf eins, zwölf vierunddreißig`, `0170 one two …`), each as
 * digits, so that numberPattern finds a number spoken in a transcript as it finds one written. The
 * words of a run are joined (`one two` is `12`: a longer number does not hold a shorter one), a
 * pause (comma, full stop, line break) becomes a space — as between digits written, so `I have two,
 * zero one seven …` still holds `0170…`; `plus` is `+`. A word that is no number word ends a run
 * (as do `and` outside `hundred and five` and `und` outside `vier und zwanzig`); a run that ends in
 * `one`, `oh`/`o` or `ein` run on into a word (`… seven eight one moment please`) is also given without
 * that word. Only runs with a number word in them (runs of digits alone numberPattern reads as they
 * are) and with at least SPACED_DIGITS digits (a number of fewer is looked for as its digits exactly,
 * never spoken).
 */
function spokenDigitRuns(text: string): string[] {
  const runs: string[] = [];
  const parts = new RegExp(SPOKEN_PART);
  const add = (run: string) => {
    if (run.replace(/\D/g, '').length >= SPACED_DIGITS) runs.push(run);
  };
  const end = (run: Run, wordAfter: boolean) => {
    if (!run.spoken) return;
    add(run.run);
    if (wordAfter && run.lastAmbiguous >= 0) add(run.run.slice(0, run.lastAmbiguous));
  };
  const keep = (atoms: Atom[], wordAfter: boolean) => readAtoms(atoms, (run, word) => end(run, word || wordAfter));
  for (const found of text.matchAll(SPOKEN_RUN)) {
    const match = found[0];
    // Fewer characters than digits needed: no need to read it (a lone `one` of prose). No word
    // gives more digits than it has letters.
    if (match.length < SPACED_DIGITS) continue;
    let atoms: Atom[] = [];
    parts.lastIndex = 0;
    // exec, not matchAll or a replace callback: a run of a million words took half the time so.
    for (let part = parts.exec(match); part !== null; part = parts.exec(match)) {
      const [, figures, plus, word, separator] = part;
      if (figures !== undefined) atoms.push({ kind: 'digits', text: figures });
      else if (plus !== undefined) atoms.push({ kind: 'plus' });
      else if (word !== undefined) {
        let atom = readWord(word);
        // `doppelnull`: the repeat and its digit in one word.
        const glued = atom === null ? /^(double|triple|doppel)(.+)$/iu.exec(word) : null;
        if (glued) {
          const digit = readWord(glued[2]!);
          if (digit?.kind === 'unit') {
            atoms.push({ kind: 'repeat', times: REPEATS[glued[1]!.toLowerCase()]! });
            atom = digit;
          }
        }
        if (atom === null) {
          // Not a number (the pattern's German compounds are read here): the run ends before it.
          keep(atoms, true);
          atoms = [];
        } else atoms.push(atom);
      } else if (SPOKEN_PAUSE.test(separator!)) atoms.push({ kind: 'pause' });
    }
    // A run that ends where a word follows after a space (`… one moment`) may have run on into it.
    const after = (found.index ?? 0) + match.length;
    keep(atoms, WORD_AFTER.test(text.slice(after, after + 6)));
  }
  return runs;
}

/** Combining marks of the HTML entities `&<letter><mark>;` (`&uuml;` is `u` and U+0308). */
const ENTITY_MARKS: Record<string, string> = {
  uml: '\u0308',
  acute: '\u0301',
  grave: '\u0300',
  circ: '\u0302',
  tilde: '\u0303',
  ring: '\u030a',
  cedil: '\u0327',
};
const ENTITIES: Record<string, string> = {
  amp: '&',
  lt: '<',
  gt: '>',
  quot: '"',
  apos: "'",
  nbsp: ' ',
  szlig: 'ß',
  aelig: 'æ',
  AElig: 'Æ',
  oslash: 'ø',
  Oslash: 'Ø',
  euro: '€',
};
/** JSON escapes (`\u00fc`, `\n`, `\"`, also escaped twice: `\\u00fc`) and HTML character references. */
const ESCAPED = /\\+(?:u([\da-fA-F]{4})|([nrt"/]))|&(?:#(\d{1,7})|#[xX]([\da-fA-F]{1,6})|([A-Za-z]{2,8}));/g;

/**
 * A remote's text with its percent-escapes, JSON escapes and HTML character references decoded
 * (`Gr%C3%BC%C3%9Fe`, `Gr\u00fc\u00dfe`, `M&uuml;ller` -> `Grüße`, `Müller`; `\n`, `\t` -> a space), so that an echo is seen in the words
 * it is made of. What is not an escape stays as it is.
 */
function decodeEscapes(escaped: string): string {
  const text = decodePercent(escaped);
  if (!text.includes('\\') && !text.includes('&')) return text;
  return text.replace(ESCAPED, (m, hex?: string, c?: string, dec?: string, hexRef?: string, name?: string) => {
    if (hex !== undefined) return String.fromCharCode(parseInt(hex, 16));
    if (c !== undefined) return c === '"' || c === '/' ? c : ' ';
    const code = dec !== undefined ? Number(dec) : hexRef !== undefined ? parseInt(hexRef, 16) : undefined;
    if (code !== undefined) return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : m;
    const mark = ENTITY_MARKS[name!.slice(1)];
    if (mark !== undefined) return `${name![0]}${mark}`.normalize('NFC');
    return ENTITIES[name!] ?? m;
  });
}

const WORD = /[\p{L}\p{N}]+(?:['’][\p{L}\p{N}]+)*/gu;
/** Words in a row that count as an echo of a text; shorter texts count only whole. */
const ECHO_WORDS = 4;

function wordsOf(text: string): string[] {
  return (text.match(WORD) ?? []).map((w) => w.toLowerCase());
}

/** The first `n` words of `text` (fewer when it has fewer), read no further. */
function firstWords(text: string, n: number): string[] {
  const words: string[] = [];
  for (const m of text.matchAll(WORD)) {
    words.push(m[0].toLowerCase());
    if (words.length === n) break;
  }
  return words;
}

/**
 * Adds to `found` each run of ECHO_WORDS words of `text` that is one of `grams` (the message's), in
 * one pass and constant memory: a run is joined only when all its words are among `words`.
 */
function echoedGrams(text: string, words: Set<string>, grams: Set<string>, found: Set<string>): void {
  const window: string[] = [];
  let known = 0; // how many of the last words, in a row, are among `words`
  for (const m of text.matchAll(WORD)) {
    const word = m[0].toLowerCase();
    window.push(word);
    if (window.length > ECHO_WORDS) window.shift();
    known = words.has(word) ? known + 1 : 0;
    if (known >= ECHO_WORDS) {
      const gram = window.join(' ');
      if (grams.has(gram)) found.add(gram);
    }
  }
}

/**
 * Removes what `err`'s message echoes of the given values (`scrubEchoes`), from its stack too
 * (BullMQ keeps both). Anything but an Error, or one with nothing to remove, is answered as it is;
 * else the same Error, its class kept.
 */
export function scrubErrorEchoes(err: unknown, values: EchoValues): unknown {
  if (!(err instanceof Error)) return err;
  const message = scrubEchoes(err.message, values);
  if (message === err.message) return err;
  if (typeof err.stack === 'string') err.stack = err.stack.split(err.message).join(message);
  err.message = message;
  return err;
}

/**
 * Removes from `text` what it echoes of the given values: runs of 4 words of a free text (or a
 * shorter text whole), every word of a name, the numbers. Each removed stretch becomes `…`. Given
 * texts or names, JSON escapes and HTML character references in `text` are decoded first (the
 * result is the decoded text).
 */
export function scrubEchoes(text: string, values: EchoValues): string {
  const texts = [...(values.texts ?? [])];
  const names = [...(values.names ?? [])];
  // An escaped echo is still an echo: its words are compared decoded (and written so).
  const decoded = texts.length > 0 || names.length > 0 ? decodeEscapes(text) : text;
  const numbers = numberPattern(values.numbers ?? []);
  const out = numbers ? asciiDigits(decoded).replace(numbers, maskDigitRun) : decoded;
  const spans = [...out.matchAll(WORD)].map((m) => ({
    start: m.index,
    end: m.index + m[0].length,
    word: m[0].toLowerCase(),
  }));
  // The phrases of the texts that the message holds: a text's runs of 4 words are looked up among
  // the message's, not collected (a transcript of a million words made a set of a million phrases,
  // 200 MB and 3 s, at every failed attempt of its call).
  const messageWords = new Set(spans.map((s) => s.word));
  const messageGrams = new Set<string>();
  for (let i = 0; i + ECHO_WORDS <= spans.length; i++)
    messageGrams.add(
      spans
        .slice(i, i + ECHO_WORDS)
        .map((s) => s.word)
        .join(' '),
    );
  const phrases = new Set<string>();
  const lengths = new Set<number>();
  for (const t of texts) {
    const head = firstWords(t, ECHO_WORDS);
    if (head.length === 0 || head.join(' ').length < 3) continue;
    lengths.add(head.length);
    if (head.length < ECHO_WORDS) phrases.add(head.join(' '));
    else if (messageGrams.size > 0) echoedGrams(t, messageWords, messageGrams, phrases);
  }
  const nameWords = new Set<string>();
  for (const name of names) for (const w of wordsOf(name)) if (w.length >= 2) nameWords.add(w);
  if (phrases.size === 0 && nameWords.size === 0) return out;

  const hit = spans.map((s) => nameWords.has(s.word));
  for (const n of lengths) {
    for (let i = 0; i + n <= spans.length; i++) {
      if (
        !phrases.has(
          spans
            .slice(i, i + n)
            .map((s) => s.word)
            .join(' '),
        )
      )
        continue;
      for (let j = i; j < i + n; j++) hit[j] = true;
    }
  }
  let result = '';
  let at = 0;
  for (let i = 0; i < spans.length; i++) {
    if (!hit[i]) continue;
    let j = i;
    // One `…` for a stretch of removed words and what stands between them.
    while (j + 1 < spans.length && hit[j + 1]) j++;
    result += `${out.slice(at, spans[i]!.start)}…`;
    at = spans[j]!.end;
    i = j;
  }
  return result + out.slice(at);
}
