// Pure helpers of the notification sinks (quiet hours across midnight and DST, clean SMS cuts,
// templates) and the example configurations of the README.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { loadConfig } from '../src/config/index.js';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { isGsm7, smsLength, textLength, truncateSms } from '../src/sinks/notify/sms-length.js';
import { quietHoursEnd } from '../src/sinks/notify/time.js';
import { escapeHtml, renderTemplate, templateFields } from '../src/sinks/template.js';

describe('quiet hours', () => {
  const berlin = { start: '21:00', end: '08:00', timeZone: 'Europe/Berlin' };
  const end = (iso: string, q = berlin) => quietHoursEnd(new Date(iso), q)?.toISOString() ?? null;

  test('across midnight: before, inside (evening and morning), at the end', () => {
    assert.equal(end('2026-04-08T18:59:00Z'), null); // 20:59
    assert.equal(end('2026-04-08T19:00:00Z'), '2026-04-09T06:00:00.000Z'); // 21:00 -> 08:00 next day
    assert.equal(end('2026-04-09T03:30:00Z'), '2026-04-09T06:00:00.000Z'); // 05:30 -> 08:00 same day
    assert.equal(end('2026-04-09T06:00:00Z'), null); // 08:00
  });

  test('the end is found in local time across DST changes', () => {
    assert.equal(end('2026-03-28T22:00:00Z'), '2026-03-29T06:00:00.000Z'); // night the clocks go forward
    assert.equal(end('2026-10-24T22:00:00Z'), '2026-10-25T07:00:00.000Z'); // night the clocks go back
  });

  test('within one day, and in another zone', () => {
    const ny = { start: '00:00', end: '07:00', timeZone: 'America/New_York' };
    assert.equal(end('2026-04-08T05:00:00Z', ny), '2026-04-08T11:00:00.000Z'); // 01:00 EDT -> 07:00 EDT
    assert.equal(end('2026-04-08T12:00:00Z', ny), null);
  });
});

describe('SMS length (GSM 03.38 / UCS-2 segments)', () => {
  const length = (text: string) => {
    const { encoding, units, segments } = smsLength(text);
    return `${encoding} ${units} ${segments}`;
  };

  test('GSM-7: 160 septets in one segment, 153 per segment beyond', () => {
    assert.equal(length(''), 'gsm7 0 1');
    assert.equal(length('a'.repeat(160)), 'gsm7 160 1');
    assert.equal(length('a'.repeat(161)), 'gsm7 161 2');
    assert.equal(length('a'.repeat(306)), 'gsm7 306 2');
    assert.equal(length('a'.repeat(307)), 'gsm7 307 3');
    assert.equal(length('a'.repeat(459)), 'gsm7 459 3');
    assert.equal(length('a'.repeat(460)), 'gsm7 460 4');
  });

  test('the extension table counts twice, and its escape is never split from its character', () => {
    for (const ch of ['€', '[', ']', '{', '}', '~', '^', '|', '\\', '\f'])
      assert.equal(length(ch), 'gsm7 2 1', JSON.stringify(ch));
    assert.equal(length('€'.repeat(80)), 'gsm7 160 1');
    assert.equal(length('€'.repeat(81)), 'gsm7 162 2');
    // 306 septets would be two segments of 153, but the € at septets 153-154 starts the second.
    assert.equal(length(`${'a'.repeat(152)}€${'a'.repeat(152)}`), 'gsm7 306 3');
  });

  test('the GSM alphabet: accented letters it has stay GSM-7; one character outside it makes the whole text UCS-2', () => {
    for (const text of [
      'Grüße aus Köln',
      'Ça va? Åsa, à bientòt',
      'Ñandù ¿¡§ £$¥ @ Ø æ ß É',
      'ΔΦΓΛΩΠΨΣΘΞ',
      'line\r\nbreak',
    ])
      assert.ok(isGsm7(text), text);
    for (const ch of ['ç', 'á', '`', '…', '’', '“', 'ж', '😀', 'ő', '\u00a0'])
      assert.equal(smsLength(`Hello ${ch}`).encoding, 'ucs2', JSON.stringify(ch));
  });

  test('UCS-2: 70 code units in one segment, 67 per segment beyond; a surrogate pair counts 2 and is never split', () => {
    assert.equal(length('ж'.repeat(70)), 'ucs2 70 1');
    assert.equal(length('ж'.repeat(71)), 'ucs2 71 2');
    assert.equal(length('ж'.repeat(134)), 'ucs2 134 2');
    assert.equal(length('ж'.repeat(135)), 'ucs2 135 3');
    assert.equal(length('😀'.repeat(35)), 'ucs2 70 1');
    assert.equal(length('😀'.repeat(36)), 'ucs2 72 2');
    // 134 units would be two segments of 67, but the emoji at units 67-68 starts the second.
    assert.equal(length(`${'ж'.repeat(66)}😀${'ж'.repeat(66)}`), 'ucs2 134 3');
  });
});

describe('SMS cut', () => {
  test('short texts stay; long ones end at a word with an ellipsis, never inside a character', () => {
    assert.equal(truncateSms('  Hello there ', { maxSegments: 1 }), 'Hello there');
    assert.equal(
      truncateSms('We moved your appointment to Friday, 9:00, see you then', { maxSegments: 3, maxLength: 40 }),
      'We moved your appointment to Friday...',
    );
    assert.equal(
      truncateSms('👍🏽'.repeat(100), { maxSegments: 1 }),
      `${'👍🏽'.repeat(17)}…`,
      'whole emoji with their skin tone, 69 units',
    );
    assert.equal(truncateSms('x'.repeat(100), { maxSegments: 3, maxLength: 20 }), `${'x'.repeat(17)}...`);
  });

  test('a GSM-7 text cut stays GSM-7 ("..." not "…") and within its segments', () => {
    const long = 'Thanks for calling. We agreed to move the appointment to Friday at nine. '.repeat(10);
    for (const maxSegments of [1, 2, 3, 4]) {
      const cut = truncateSms(long, { maxSegments });
      const { encoding, segments, units } = smsLength(cut);
      assert.equal(encoding, 'gsm7', `${maxSegments}: ${cut.slice(-12)}`);
      assert.ok(cut.endsWith('...'));
      assert.ok(segments <= maxSegments, `${segments} segments`);
      const capacity = maxSegments === 1 ? 160 : 153 * maxSegments;
      assert.ok(units > capacity * 0.66, `uses the room: ${units} of ${capacity}`);
    }
    // Extension characters count twice while cutting, too.
    const euros = truncateSms('Price: 10 € '.repeat(40), { maxSegments: 1 });
    assert.equal(smsLength(euros).encoding, 'gsm7');
    assert.ok(smsLength(euros).units <= 160, String(smsLength(euros).units));
  });

  test('a UCS-2 text is cut to its segments with "…", at a grapheme', () => {
    const cyrillic = 'Спасибо за звонок. Мы перенесли встречу на пятницу. '.repeat(10);
    const cut = truncateSms(cyrillic, { maxSegments: 2 });
    assert.deepEqual([smsLength(cut).encoding, smsLength(cut).segments], ['ucs2', 2]);
    assert.ok(cut.endsWith('…') && smsLength(cut).units > 134 * 0.66);
    // The only character outside GSM in the part that is cut off: what is kept is GSM-7, cheaper.
    const tail = truncateSms(`${'Thanks for calling. '.repeat(20)}😀`, { maxSegments: 1 });
    assert.equal(smsLength(tail).encoding, 'gsm7');
    assert.ok(tail.endsWith('...') && tail.length <= 160);
  });

  test('any text: within the limits, GSM-7 kept GSM-7, whole characters of the original, well-formed', () => {
    const alphabet = ['a', 'Z', ' ', '.', ',', 'ü', '€', '{', '\n', 'ж', '😀', '👍🏽', 'e\u0301', 'ç', '…', '🇩🇪'];
    const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...alphabet), { maxLength: 700 }),
        fc.integer({ min: 1, max: 5 }),
        fc.option(fc.integer({ min: 20, max: 400 }), { nil: undefined }),
        (parts, maxSegments, maxLength) => {
          const text = parts.join('');
          const cut = truncateSms(text, { maxSegments, maxLength });
          assert.ok(smsLength(cut).segments <= maxSegments);
          if (maxLength !== undefined) assert.ok(textLength(cut) <= maxLength);
          if (isGsm7(text)) assert.equal(smsLength(cut).encoding, 'gsm7');
          assert.doesNotMatch(
            cut,
            /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/,
            'no lone surrogate',
          );
          const kept = cut === text.trim() ? cut : cut.replace(/(\.\.\.|…)$/, '');
          const original = Array.from(segmenter.segment(text.trim()), (g) => g.segment);
          const graphemes = Array.from(segmenter.segment(kept), (g) => g.segment);
          assert.deepEqual(graphemes, original.slice(0, graphemes.length), 'a prefix of whole characters');
        },
      ),
      { numRuns: 400 },
    );
  });
});

/** The cut as it was before the head bound: segments the whole text (quadratic on Node 20, fine for short texts). */
function truncateWhole(text: string, limits: { maxSegments: number; maxLength?: number }): string {
  const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });
  const trimmed = text.trim();
  const fits = (t: string) =>
    smsLength(t).segments <= limits.maxSegments &&
    (limits.maxLength === undefined || textLength(t) <= limits.maxLength);
  if (fits(trimmed)) return trimmed;
  const graphemes = Array.from(segmenter.segment(trimmed), (s) => s.segment);
  const ellipsis = (t: string) => (isGsm7(t) ? '...' : '…');
  const finish = (count: number) => {
    let cut = graphemes.slice(0, count).join('');
    const lastSpace = cut.search(/\s\S*$/);
    if (lastSpace >= Math.floor(cut.length * 0.66)) cut = cut.slice(0, lastSpace);
    cut = cut.replace(/[\s,;:.\-–—]+$/u, '');
    return cut + ellipsis(cut);
  };
  let lo = 0;
  let hi = graphemes.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    const prefix = graphemes.slice(0, mid).join('');
    if (fits(prefix + ellipsis(prefix))) lo = mid;
    else hi = mid - 1;
  }
  for (let count = lo; count > 0; count--) {
    const candidate = finish(count);
    if (fits(candidate)) return candidate;
  }
  return fits('...') ? '...' : '';
}

describe('SMS cut of a long text', () => {
  test('only the head of a long text is looked at: the same cut as segmenting it whole', () => {
    const alphabet = ['a', 'Z', ' ', '.', 'ü', '€', '\n', 'ж', '😀', '👍🏽', 'e\u0301', '🇩🇪', '\r\n'];
    fc.assert(
      fc.property(
        // Around and beyond the bound (160 to 1,530 code units for 1 to 10 segments).
        fc.array(fc.constantFrom(...alphabet), { minLength: 100, maxLength: 2200 }),
        fc.integer({ min: 1, max: 10 }),
        fc.option(fc.integer({ min: 20, max: 2000 }), { nil: undefined }),
        (parts, maxSegments, maxLength) => {
          const text = parts.join('');
          assert.equal(truncateSms(text, { maxSegments, maxLength }), truncateWhole(text, { maxSegments, maxLength }));
        },
      ),
      { numRuns: 150 },
    );
  });

  // Not a speed check: before, segmenting a 3 MB summary whole took hours and blocked the worker's
  // event loop (ingress, health and every other sink with it). The limit is for a hang only.
  test('a summary of 3 million characters is cut, not a hang', { timeout: 60_000 }, () => {
    const summary = 'Frau Müller möchte ihren Vertrag kündigen, die Rechnung für März war zu hoch. '.repeat(40_000);
    for (const maxSegments of [1, 3, 10]) {
      const cut = truncateSms(`Thanks for calling. ${summary}`, { maxSegments, maxLength: 2000 });
      assert.ok(cut.startsWith('Thanks for calling. Frau Müller') && cut.endsWith('...'), cut.slice(-20));
      assert.ok(smsLength(cut).segments <= maxSegments);
    }
  });
});

describe('text length', () => {
  test('counts user-perceived characters, with a shortcut for plain ASCII', () => {
    assert.equal(textLength('Thanks for calling.\tAgreed: a visit'), 35);
    assert.equal(textLength('two\nlines'), 9);
    assert.equal(textLength('a\r\nb'), 3, 'CR LF is one character');
    assert.equal(textLength('Grüße 👋🏽'), 7, 'an accented letter and an emoji with a skin tone count once');
    assert.equal(textLength('e\u0301'), 1, 'a letter with a combining accent counts once');
    assert.equal(textLength(''), 0);
  });
});

describe('templates', () => {
  test('fields are replaced, unknown ones are empty, only values are escaped', () => {
    assert.equal(
      renderTemplate('<b>{{ name }}</b> {{missing}}!', { name: 'A & B' }, { escape: escapeHtml }),
      '<b>A &amp; B</b> !',
    );
    assert.equal(renderTemplate('{{list}} {{n}} {{obj.x}}', { list: ['a', 'b'], n: 3, obj: { x: 'y' } }), 'a, b 3 y');
    assert.deepEqual(templateFields('{{a}} {{ b }} {{a}}'), ['a', 'b']);
  });
});

describe('README examples', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  /** The first YAML block after a heading. */
  const yamlAfter = (heading: string) => {
    const at = readme.indexOf(heading);
    assert.ok(at >= 0, `README has "${heading}"`);
    const block = /```yaml\n([\s\S]*?)```/.exec(readme.slice(at))?.[1];
    assert.ok(block, `a yaml block after "${heading}"`);
    return block;
  };
  // What the examples need besides the file: the platform API for the SMS rules (README's table says so).
  const env = {
    TELEPHONY_SMS_ID: 's0',
    TELEPHONY_API_URL: 'https://api.example.com/v2',
    TELEPHONY_ACCESS_TOKEN: 'at',
    ARCHIVE_BUCKET: 'calls',
    KMS_KEY_ID: 'key-1',
    SMTP_URL: 'smtp://127.0.0.1:2525',
  };

  test('the notification rules load as they are written', () => {
    const config = loadConfig(
      { CALLSYNC_CONFIG: 'rules.yaml', ...env },
      { readFile: () => yamlAfter('### Example rules (ready to copy)') },
    );
    assert.deepEqual(
      Object.values(config.sinks)
        .map((s) => s.type)
        .sort(),
      ['email', 'sms', 'sms'],
    );
    assert.equal(config.routes.length, 3);
  });

  test('the sinks-and-routes example loads as it is written', () => {
    const config = loadConfig(
      { CALLSYNC_CONFIG: 'callsync.yaml', ...env },
      { readFile: () => yamlAfter('### The config file: sinks and routes') },
    );
    assert.equal(config.sinks.archive?.type, 'archive');
    assert.equal(config.routes.length, 2);
  });
});
