// src/redact.ts without servers: the numbers a remote echoes, in the spellings and with the glue
// remotes write them, never survive redactRemoteText; dates, times, short codes and ids stay
// readable. The same text through real servers and queues: test/redaction.redis.test.ts.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { numberSpellings, toE164 } from '../src/model/phone.js';
import { maskDigitRuns, numberFinder, numberPattern, redactRemoteText, scrubEchoes } from '../src/redact.js';
import { scrubCallEchoes } from '../workers/deliver.js';
import { sampleCall } from './support/calls.js';

/** A German mobile number (fictitious) and the digit sequences of it a text must not hold. */
const MOBILE_DIGITS = ['4917612349876', '017612349876', '17612349876', '12349876', '1234 9876'];

function assertNoNumber(text: string, where: string): void {
  const digits = text.replace(/\D/g, '');
  for (const piece of MOBILE_DIGITS)
    assert.ok(!digits.includes(piece.replace(/\D/g, '')), `${where}: "${piece}" survived in ${text}`);
}

describe('redactRemoteText: a number echoed by a remote is masked whatever it is glued to', () => {
  const cases: [string, string][] = [
    ['Nr.017612349876 invalid', 'Nr.****876 invalid'],
    ['Tel.+4917612349876 invalid', 'Tel.+****876 invalid'],
    ['recipient 0176-12-34-98-76 invalid', 'recipient ****876 invalid'],
    // A valid month and day: still a number, with more digits glued on.
    ['recipient 0176-12-24-98-76', 'recipient ****876'],
    ['recipient 2026-12-06-98-76', 'recipient ****876'],
    ['invalid number +4917612349876.Check format', 'invalid number +****876.Check format'],
    ['invalid number +4917612349876-invalid', 'invalid number +****876-invalid'],
    ['phone_4917612349876 bad', 'phone_****876 bad'],
    ['number: 4917612349876s', 'number: ****876s'],
    ['recipient 4917612349876 sec', 'recipient ****876 sec'],
    ['recipient 4917612349876 ms', 'recipient ****876 ms'],
    ['to=4917612349876&x', 'to=****876&x'],
    ['recipient ０１７６１２３４９８７６ (full-width)', 'recipient ****876 (full-width)'],
    ['recipient ＋４９　１７６　１２３４９８７６', 'recipient +****876'],
    ['recipient ٠١٧٦١٢٣٤٩٨٧٦ (Arabic-Indic)', 'recipient ****876 (Arabic-Indic)'],
    ['recipient +۴۹ ۱۷۶ ۱۲۳۴۹۸۷۶ (Persian)', 'recipient +****876 (Persian)'],
    // Invisible format characters between the digits (bidi marks of right-to-left text, zero-width
    // spaces and joiners, soft hyphens) are not there for the reader: they glue nothing apart.
    ['recipient \u200e+49\u200e176\u200e12349876\u200e', 'recipient +****876'],
    ['recipient 0176\u200f1234\u200b9876 (RLM, ZWSP)', 'recipient ****876 (RLM, ZWSP)'],
    ['recipient \u2066+49 176\u00ad1234\u20609876\u2069', 'recipient +****876'],
    ['recipient +49.176.123.498.76', 'recipient +****876'],
    ['tel:+49-176-12349876', 'tel:+****876'],
    ['recipient +49 (0) 176 1234 9876', 'recipient +****876'],
    ['recipient 0049 176 / 1234 98 76', 'recipient ****876'],
    ['"to":"+4917612349876"', '"to":"+****876"'],
    ['ab4917612349876cd', 'ab****876cd'],
    // Glued with what a remote's HTML or typesetting puts between the groups.
    ['caller +49_211_6355340', 'caller +****340'],
    ['caller +49&nbsp;211&nbsp;6355340 refused', 'caller +****340 refused'],
    ['caller +49&#160;211&#xA0;6355340', 'caller +****340'],
    ['caller +49\u00a0211\u202f635\u200953\u200b40', 'caller +****340'],
    // Formatted by a remote's locale (thousands), split by the markup it highlights a part with.
    [
      'field "from": 492,116,355,340 is not a valid account number',
      'field "from": ****340 is not a valid account number',
    ],
    ['caller 49·211·635·53·40', 'caller ****340'],
    ['invalid caller +49 211 <b>635</b> 53 40', 'invalid caller +****340'],
    ['<p>caller <span class="n">+49 211</span> <em>6355340</em><br/></p>', 'caller +****340'],
    [
      'Empfaenger Nr.017687654321 ungueltig; Format 0176-87-65-43-21; recipient 4917687654321.Check format',
      'Empfaenger Nr.****321 ungueltig; Format ****321; recipient ****321.Check format',
    ],
    // A date or an address with a number glued on is not kept whole.
    ['recipient 2026-12-06 +4917612349876', 'recipient 2026-12-06 +****876'],
    ['recipient 49 2026-12-06 98 76', 'recipient ****876'],
    // A number that begins in a query value and goes on after a space (the property found it).
    ['GET /sms?x=1&to=01761 23498 7 refused', 'GET /sms?x=…&to=… refused'],
    ['&a=01761 23498 76', '&a=…'],
  ];
  for (const [input, expected] of cases)
    test(input, () => {
      assert.equal(redactRemoteText(input), expected);
      assertNoNumber(redactRemoteText(input), input);
    });

  // An API that echoes a form or a URL it was sent writes the call's number percent-escaped: runs of
  // 2 to 6 digits, none of which was masked before.
  for (const [input, expected] of [
    ['cannot parse Reach%20me%20at%20%2B49%20176%201234%209876.', 'cannot parse Reach me at +****876.'],
    ['to=%2B49+176+1234+9876&x', 'to=+****876&x'],
    ['bad recipient 0176%2F1234%205678%2090', 'bad recipient ****890'],
    ['escaped twice: %252B49%2520176%25201234%25209876', 'escaped twice: +****876'],
    ['recipient %EF%BC%90%EF%BC%91%EF%BC%97%EF%BC%96 1234 9876', 'recipient ****876'],
  ] as [string, string][])
    test(`percent-escaped: ${input}`, () => {
      assert.equal(redactRemoteText(input), expected);
      assertNoNumber(redactRemoteText(input), input);
      assert.equal(redactRemoteText(redactRemoteText(input)), redactRemoteText(input), 'idempotent');
    });

  test('a credential with a digit run is still cut whole (digits are masked first)', () => {
    assert.equal(
      redactRemoteText('Authorization: Bearer abcdefgh12345678ijklmnopqrstuv refused'),
      'Authorization: Bearer … refused',
    );
    assert.equal(redactRemoteText('see /p?api_token=abc1234567890def&x=1'), 'see /p?api_token=…&x=…');
  });

  test('a 7-or-more-digit quantity is masked too (it may be a number written before a unit)', () => {
    assert.equal(redactRemoteText('retry in 86400000 ms, max 1048576 bytes'), 'retry in ****00 ms, max ****76 bytes');
  });
});

describe('numberFinder (`callsync forget`): the number with invisible format characters between its digits', () => {
  const finds = numberFinder(numberSpellings('+491701234567'))!;
  for (const text of [
    'call me on 0170\u200f1234567',
    'رقمي \u200f٠١٧٠\u200f ١٢٣٤٥٦٧\u200f',
    '\u2066+49 170 1234567\u2069',
    '+\u200e49\u200e170\u200e1234567',
    '۰۱۷۰\u200c۱۲۳۴۵۶۷',
    '0170\u00ad123\u200b4567',
  ])
    test(JSON.stringify(text), () => assert.ok(finds(text)));
  // Escaped as a payload's fields may keep it: percent-escaped in a link (`%20` spaces, also twice),
  // JSON-escaped digits (a sender's encoder writes `\u0660` for `٠`), HTML character references.
  for (const text of [
    'https://crm.example/search?q=%2B49%20170%201234567',
    'q=0170%25201234567',
    '{"note":"\\u0660\\u0661\\u0667\\u0660 \\u0661\\u0662\\u0663\\u0664\\u0665\\u0666\\u0667"}',
    '&#x2B;49&#x20;170&#x20;1234567',
    // A call as JSON (what forget reads): a line break between two groups is `\n` there.
    JSON.stringify({ content: 'Caller: call me back on 0170\n1234567' }),
  ])
    test(`escaped: ${text}`, () => assert.ok(finds(text)));
  test('an invisible character does not make another number this one', () => {
    assert.ok(!finds('0170\u200f12345678'));
    assert.ok(!finds('90170\u200e1234567'));
  });
  test('toE164 reads a number wrapped in bidi marks, as right-to-left text copies it', () => {
    assert.equal(toE164('\u200e+49 170 1234567\u200e'), '+491701234567');
    assert.equal(toE164('\u202a+٤٩ ١٧٠ ١٢٣٤٥٦٧\u202c'), '+491701234567');
  });

  test('toE164 reads no country code into a number written nationally (an area code in brackets, a trunk 0)', () => {
    for (const national of ['(201) 555-0123', ' ( 201 ) 555 0123', '(030) 1234567', 'tel:(201)555-0123', '030 1234567'])
      assert.equal(toE164(national), null, national);
    // With its country code it is E.164, brackets or not; digits alone are E.164 without the `+`.
    assert.equal(toE164('+1 (201) 555-0123'), '+12015550123');
    assert.equal(toE164('+49 (30) 1234567'), '+49301234567');
    assert.equal(toE164('12015550123'), '+12015550123');
    assert.equal(toE164('4930 1234567'), '+49301234567');
    // The numbers of the platform's documented payloads (test/fixtures/platform/README.md says where
    // each comes from) still read as E.164: digits alone, and with the `+`.
    for (const name of ['ci-webhook-current', 'spec-v1-required', 'spec-v2', 'ai-assistant-webhook-legacy']) {
      const { call } = JSON.parse(readFileSync(`test/fixtures/platform/${name}.json`, 'utf8')) as {
        call: Record<string, string>;
      };
      for (const number of [call.from ?? call.caller, call.to ?? call.callee])
        assert.equal(toE164(number), `+${number!.replace(/\D/g, '')}`, `${name}: ${number}`);
    }
  });
});

describe('redactRemoteText: what is clearly not a phone number stays readable', () => {
  const kept = [
    'HTTP 503 Service Unavailable',
    'answered 429 after 86400 s, max 65536 bytes, code 123456',
    'at 2026-12-06T13:17:41Z',
    'at 2026-04-08T10:03:00.000Z and 2026-04-08 10:03 and 2026-04-08T10:03:00+02:00 and 1999-01-31',
    '2026-12-06 10:03:00 503 Service Unavailable',
    'connect 192.168.100.200:587, ECONNREFUSED 127.0.0.1:31555/hook400',
    'id a1b2c3d4-1234-5678-9abc-def012345678',
    'call 106a7ea4ddbe7cb0ad392d6b52aeec80 failed',
    'error 40001, code 12-345, version 1.2.3',
    '… and …',
  ];
  for (const text of kept) test(text, () => assert.equal(redactRemoteText(text), text));

  test('an invalid date, time or address is read as digits', () => {
    assert.equal(maskDigitRuns('on 2026-13-06 at'), 'on ****06 at');
    assert.equal(maskDigitRuns('on 2026-12-32 at'), 'on ****32 at');
    assert.equal(maskDigitRuns('at 2026-12-06T25:17:41Z'), 'at 2026-12-06T25:17:41Z', 'runs of 8 and 2 digits');
    assert.equal(maskDigitRuns('at 0176-12-06'), 'at ****06');
    assert.equal(maskDigitRuns('to 176.123.498.76'), 'to ****876');
  });

  test('is idempotent', () => {
    const once = redactRemoteText('Nr.017612349876.Check; 2026-12-06; 0176-12-34-98-76; ０１７６１２３４９８７６');
    assert.equal(once, 'Nr.****876.Check; 2026-12-06; ****876; ****876');
    assert.equal(redactRemoteText(once), once);
  });
});

/** A German mobile number in E.164, `+49 15x/16x/17x` and 7 or 8 more digits. */
const germanMobile = fc
  .tuple(
    fc.constantFrom(
      '151',
      '152',
      '157',
      '159',
      '160',
      '162',
      '163',
      '170',
      '171',
      '172',
      '175',
      '176',
      '177',
      '178',
      '179',
    ),
    fc.stringMatching(/^[0-9]{7,8}$/),
  )
  .map(([prefix, rest]) => ({ e164: `+49${prefix}${rest}`, national: `0${prefix}${rest}` }));

/** Characters a remote may glue to a number: letters, punctuation, JSON and markup. */
const glue = fc.string({
  unit: fc.constantFrom(...'abcsxNr._-:;=&?#"\'<>/()[]{},+* \t\n|\\~@!äöü€'.split('')),
  maxLength: 6,
});

/** A spelling of the number: E.164, 00…, digits only, national; grouped with one separator. */
const spelling = fc
  .tuple(
    germanMobile,
    fc.constantFrom('e164', '00', 'digits', 'national'),
    fc.constantFrom('', ' ', '-', '.', '/'),
    fc.integer({ min: 2, max: 5 }),
  )
  .map(([n, form, sep, group]) => {
    const digits = n.e164.slice(1);
    const [head, body] =
      form === 'e164'
        ? ['+', digits]
        : form === '00'
          ? ['00', digits]
          : form === 'digits'
            ? ['', digits]
            : ['', n.national];
    const groups = body.match(new RegExp(`.{1,${group}}`, 'g'))!;
    return { n, text: head + groups.join(sep) };
  });

describe('redactRemoteText (property)', () => {
  test('a German mobile number embedded with any glue never survives', () => {
    fc.assert(
      fc.property(glue, spelling, glue, (before, { n, text }, after) => {
        const out = redactRemoteText(`${before}${text}${after}`);
        const digits = out.replace(/\D/g, '');
        const national = n.national.slice(1);
        // Its last 3 digits may stay; 6 of them in a row never.
        for (let i = 0; i + 6 <= national.length; i++)
          assert.ok(!digits.includes(national.slice(i, i + 6)), `${JSON.stringify(before + text + after)} -> ${out}`);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("scrubEchoes: the call's numbers in the spellings a remote writes them", () => {
  const numbers = ['+4917612349876', '+492116355340'].flatMap(numberSpellings);
  const cases: [string, string][] = [
    ['Empfaenger Nr.017612349876 ungueltig', 'Empfaenger Nr.****876 ungueltig'],
    ['recipient 4917612349876.Check format', 'recipient ****876.Check format'],
    ['recipient 004917612349876', 'recipient ****876'],
    ['Format 0176-12-34-98-76', 'Format ****876'],
    ['recipient 0176 / 1234 98 76', 'recipient ****876'],
    ['recipient +49 (0) 176 1234 9876', 'recipient +****876'],
    ['key phone_0176_1234_9876', 'key phone_****876'],
    ['to ０１７６１２３４９８７６', 'to ****876'],
    ['landline (0211) 635 53 40 and 0211/6355340', 'landline (****340 and ****340'],
    // Five separators between two digits, a form-encoded `+`, no trunk 0 nor country code.
    ['recipient 0176  –  12349876', 'recipient ****876'],
    ['text=call+me+on+%2B49+176+1234+9876', 'text=call+me+on+%2B****876'],
    ['recipient 176 1234 9876', 'recipient ****876'],
  ];
  for (const [input, expected] of cases)
    test(input, () => {
      assert.equal(scrubEchoes(input, { numbers }), expected);
      assertNoNumber(scrubEchoes(input, { numbers }), input);
    });

  test('other numbers and digits glued to the number stay as they are', () => {
    const other = 'HTTP 503, code 123456, 2026-12-06T13:17:41Z, 01761234987 and 1017612349876';
    assert.equal(scrubEchoes(other, { numbers }), other);
  });

  test('numberSpellings: E.164, national, with the trunk 0; a number without country code as it is', () => {
    assert.deepEqual(numberSpellings('+49 176 1234 9876'), [
      '+4917612349876',
      '017612349876',
      '+49017612349876',
      '17612349876',
    ]);
    assert.deepEqual(numberSpellings('+12133734253'), ['+12133734253', '2133734253']);
    assert.deepEqual(numberSpellings('0176 12349876'), ['0176 12349876']);
    assert.deepEqual(numberSpellings(' '), []);
  });

  test('a "number" of thousands of digits (a sender\'s garbage in call.from) is no pattern, and breaks nothing', () => {
    // Each digit is a piece of the pattern: 20,000 of them made one V8 could not compile ("Invalid
    // regular expression … Stack overflow"), thrown from every delivery of the call.
    for (const digits of [100, 5_000, 20_000]) {
      const long = '7'.repeat(digits);
      assert.doesNotThrow(() => numberPattern(numberSpellings(long)), `${digits} digits`);
      const text = `remote: recipient 0176-12349876 and ${'7'.repeat(40)} refused`;
      const out = scrubEchoes(text, { numbers: [...numberSpellings(long), ...numberSpellings('+4917612349876')] });
      assert.equal(out, `remote: recipient ****876 and ${'7'.repeat(40)} refused`, `${digits} digits`);
    }
    // A number of any length a phone number has (with a country code, a trunk 0 and an extension) still is one.
    assert.equal(scrubEchoes('to 004917612349876123', { numbers: ['+4917612349876123'] }), 'to ****123');
  });

  test('a delivery error loses the number of its call in any spelling', () => {
    const call = { ...sampleCall('c-spell'), from: '+4917612349876', fromRaw: '+49 176 12349876' };
    const err = new Error('Telephony API answered 400: Empfaenger Nr.017612349876; recipient 4917612349876.Check');
    scrubCallEchoes(err, call);
    assert.equal(err.message, 'Telephony API answered 400: Empfaenger Nr.****876; recipient ****876.Check');
  });
});

describe('scrubEchoes: a transcript or summary echoed with escapes', () => {
  const SUMMARY = 'Frau Müller möchte ihren Vertrag kündigen, weil die Rechnung für März zu hoch ist.';
  const TRANSCRIPT = 'Grüß Gott, hier spricht Jürgen Weiß.\nIch möchte meinen Vertrag kündigen.';
  const values = { texts: [SUMMARY, TRANSCRIPT], names: ['Jürgen Weiß'] };
  /** What must not be left of the call's texts. */
  const FORBIDDEN_WORDS = [
    'Müller',
    'M\\u00fcller',
    'M&uuml;ller',
    'Vertrag',
    'Rechnung',
    'Weiß',
    'Wei\\u00df',
    'Gott',
  ];
  /** Escaped the way Python's json.dumps and Jackson's ASCII mode write JSON. */
  const asciiJson = (t: string) =>
    JSON.stringify(t).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const cases: [string, string][] = [
    [`validation failed for text: ${asciiJson(TRANSCRIPT)}`, 'validation failed for text: "…."'],
    [
      `{"status":400,"field":"message","value":${asciiJson(`Thanks for calling. ${SUMMARY}`)}}`,
      '{"status":400,"field":"message","value":"Thanks for calling. …."}',
    ],
    // Escaped twice (JSON in a JSON string).
    [`error: ${JSON.stringify(asciiJson(SUMMARY))}`, 'error: ""….""'],
    [
      '<p>Frau M&uuml;ller m&ouml;chte ihren Vertrag k&#252;ndigen, weil die Rechnung f&#xFC;r M&auml;rz zu hoch ist.</p>',
      '<p>….</p>',
    ],
    ['text Grüß Gott, hier spricht\\nIch möchte meinen Vertrag kündigen rejected', 'text … rejected'],
  ];
  for (const [input, expected] of cases)
    test(input.slice(0, 60), () => {
      const out = scrubEchoes(input, values);
      assert.equal(out, expected);
      for (const w of FORBIDDEN_WORDS) assert.ok(!out.includes(w), `"${w}" in ${out}`);
    });

  test('a transcript echoed percent-escaped (a form or URL the remote was sent) is found in its words', () => {
    const echoed = `{"message":"cannot parse ${encodeURIComponent(`Thanks for calling. ${SUMMARY}`)}"}`;
    // As a delivery sees it: the remote's text redacted where it came in, then the call's echoes removed.
    const out = scrubEchoes(redactRemoteText(echoed, 10_000), values);
    assert.equal(out, '{"message":"cannot parse Thanks for calling. …."}');
    for (const w of FORBIDDEN_WORDS) assert.ok(!out.includes(w), `"${w}" in ${out}`);
    // scrubEchoes decodes on its own too.
    assert.equal(scrubEchoes(`x ${encodeURIComponent(TRANSCRIPT)}`, values), 'x ….');
  });

  test('names are found escaped too; text that echoes nothing is only decoded', () => {
    assert.equal(scrubEchoes('contact J\\u00fcrgen Wei&szlig; failed', values), 'contact … failed');
    assert.equal(scrubEchoes('bad value \\u00abx\\u00bb &amp; more', values), 'bad value «x» & more');
    assert.equal(scrubEchoes('&unknown; &#0; \\x', values), '&unknown; &#0; \\x');
  });

  test('without texts or names (numbers only, as the timeline scrubs) the text is not decoded', () => {
    assert.equal(scrubEchoes('M\\u00fcller &amp;', { numbers: ['+4917612349876'] }), 'M\\u00fcller &amp;');
  });
});

describe('redactRemoteText on hostile sizes', () => {
  // Not a speed check: before, a long run of an e-mail's characters without an `@` was scanned to
  // its end from each of its positions (80 KB took 4 s; a remote's megabytes, hours). The limit is
  // for a hang only.
  test(
    'a megabyte of digits and dashes, or of characters an e-mail is made of, is redacted, not a hang',
    { timeout: 60_000 },
    () => {
      for (const text of ['1-'.repeat(500_000), 'a.'.repeat(500_000), `${'x'.repeat(1_000_000)} +4917612349876`]) {
        const out = redactRemoteText(text);
        assert.ok(out.length <= 300, String(out.length));
        assert.ok(!out.includes('17612349876'));
      }
    },
  );

  test('of a long text the head and the end are what is kept, masked', () => {
    const text = `Nr.+4917612349876 refused; ${'filler '.repeat(5000)} caller 0176-12-34-98-76`;
    const out = redactRemoteText(text);
    assert.match(out, /^Nr\.\+\*\*\*\*876 refused; filler/);
    assert.ok(out.endsWith('caller ****876'), out.slice(-40));
  });
});
