// numberFinder (src/redact.ts, what `callsync forget` finds a caller with) and a number spoken in a
// transcript: speech-to-text writes a number read out as digit words, in English and German,
// with pauses, `double`, `plus`, digits among the words. Such a text holds the number; another
// number spoken, a run too short for a phone number and ordinary prose do not. And the finder stays
// linear on a transcript of megabytes of digit words (the forget end to end:
// test/privacy-forget-spoken.redis.test.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { numberSpellings } from '../src/model/phone.js';
import { numberFinder } from '../src/redact.js';

/** 0170 1234567 (a German mobile number, fictitious). */
const A = '+491701234567';
/** 0151 12345500: doubles in it. */
const B = '+4915112345500';
/** 030 1112223: triples in it. */
const C = '+49301112223';
/** 0151 12345678. */
const D = '+4915112345678';
/** 1-800-555-1234 (a US toll-free number). */
const US = '+18005551234';
/** (312) 555-1984, (305) 555-1500: fictitious US numbers. */
const E = '+13125551984';
const F = '+13055551500';

const finder = (number: string) => numberFinder(numberSpellings(number))!;

describe('numberFinder: a number spoken as digit words is found', () => {
  const cases: [string, string][] = [
    [A, 'my number is zero one seven zero, one two three four five six seven'],
    [A, 'Caller: It is plus four nine one seven zero one two three four five six seven, thanks.'],
    [A, 'zero zero four nine, one seven zero, one two three four five six seven'],
    [A, 'ZERO ONE SEVEN ZERO ONE TWO THREE FOUR FIVE SIX SEVEN'],
    [A, 'oh one seven o - one-two-three - four-five-six-seven'],
    [A, 'one seven zero, one two three four five six seven (without the zero)'],
    [A, 'null eins sieben null, eins zwei drei vier fünf sechs sieben'],
    [A, 'Plus vier neun, eins sieben null, eins zwo drei vier fuenf sechs sieben.'],
    [A, 'null eins sieben null eins zwei drei vier fu\u0308nf sechs sieben'],
    [A, 'Meine Nummer: NULL EINS SIEBEN NULL EINS ZWEI DREI VIER FÜNF SECHS SIEBEN'],
    // Digits and words mixed, as speech-to-text writes a number read partly in groups.
    [A, 'my number is 0170 one two three four five six seven'],
    [A, 'zero one seven zero 1234567'],
    [A, '+49 one seven zero 123 four five six seven'],
    // Two numbers said in a row with a pause: the second is still found.
    [A, 'I have two, zero one seven zero, one two three four five six seven'],
    [B, 'zero one five one, one two three four double five double zero'],
    [B, 'null eins fünf eins, eins zwo drei vier doppel fünf doppelnull'],
    [B, 'null eins fünf eins eins zwei drei vier doppel-fünf doppel null'],
    [C, 'zero three zero, triple one triple two three'],
    // A line break between two groups, in a call as JSON (what forget reads: `\n` there).
    [A, JSON.stringify({ content: 'Caller: zero one seven zero\none two three four five six seven.' })],
    // Escaped as a field kept verbatim may hold it.
    [A, 'q=zero%20one%20seven%20zero%20one%20two%20three%20four%20five%20six%20seven'],
    [A, '{"t":"null eins sieben null eins zwei drei vier f\\u00fcnf sechs sieben"}'],
    // Read in pairs and groups, as numbers: teens, tens, hundreds (English words, German compounds).
    [D, 'oh one five one, twelve thirty-four fifty-six seventy-eight'],
    [D, 'zero one five one twelve thirty four fifty six seventy eight'],
    [D, 'null eins fünf eins, zwölf vierunddreißig sechsundfünfzig achtundsiebzig'],
    [D, 'NULL EINS FÜNF EINS ZWÖLF VIERUNDDREISSIG SECHSUNDFÜNFZIG ACHTUNDSIEBZIG'],
    [D, 'null eins fünf eins, zwölf vier und dreißig sechs und fünfzig acht und siebzig'],
    [D, 'null eins fu\u0308nf eins zwo\u0308lf vierunddreißig sechsundfu\u0308nfzig achtundsiebzig'],
    [A, 'null eins sieben null, einhundertdreiundzwanzig, vier fünf sechs sieben'],
    [A, 'zero one seven zero, one hundred twenty-three, four five six seven'],
    [US, 'one eight hundred five five five one two three four'],
    [US, 'one, eight hundred, five five five, twelve thirty-four'],
    [E, 'three one two, five five five, nineteen eighty-four'],
    [E, 'three one two, five five five, nineteen hundred eighty-four'],
    [F, 'three hundred and five, five five five, fifteen hundred'],
    [F, 'three oh five, five five five, fifteen hundred'],
    // A last `one` (`oh`, `ein`) that is the start of the next words, not a digit.
    [A, 'zero one seven zero one two three four five six seven one moment please'],
    [A, 'null eins sieben null eins zwei drei vier fünf sechs sieben ein Moment bitte'],
    [A, 'zero one seven zero one two three four five six seven and that is all'],
  ];
  for (const [number, text] of cases) test(`${number}: ${text}`, () => assert.ok(finder(number)(text)));
});

describe('numberFinder: what is not the number spoken is not found', () => {
  const finds = finder(A);
  for (const text of [
    // Another number: a digit more, a digit other, a digit less.
    'my number is zero one seven zero one two three four five six seven eight',
    'my number is zero one seven zero, one two three four five six eight',
    'zero one seven zero one two three four five six',
    'null eins sieben null eins zwei drei vier fünf sechs sieben acht',
    'one zero one seven zero one two three four five six seven',
    'zero one seven zero one two three four five six double seven',
    // Numbers said in words that are other digits: a tens word is two digits, a hundred three.
    'zero one seven zero one two three four five six seventy',
    'oh one seven oh, twelve thirty-four fifty-six seventeen',
    'zero one seven zero, one hundred twenty, three four five six seven',
    'null eins sieben null, einhundertdreiundzwanzig vier fünf sechs sieben acht',
    // A last `one` with no word after it is a digit: the number is one digit longer.
    'zero one seven zero one two three four five six seven one',
    'zero one seven zero one two three four five six seven one. Moment',
    // `and` is no digit: the run ends there.
    'zero one seven zero and one two three four five six seven',
    // Words that end or hold a digit word are not one (`someone`, `phone`, `often`).
    'someone seven zero one two three four five six seven',
    'zero one seven zero one two three four five six sevens',
    // Ordinary prose.
    'one of two rooms, one night, two guests, three bags, four o clock, five stars',
    'Ich habe ein Auto, zwei Hunde und drei Katzen; null Probleme.',
    JSON.stringify({ a: null, b: null, c: [null, null, null, null, null, null, null, null] }),
  ])
    test(text, () => assert.ok(!finds(text)));

  test('a number of fewer than 7 digits is found written exactly, never spoken (a run that short is no phone number)', () => {
    const extension = numberFinder(numberSpellings('4711'))!;
    assert.ok(extension('dial 4711'));
    assert.ok(!extension('dial four seven one one'));
    assert.ok(!extension('dial four seven double one'));
  });
});

describe('numberFinder on a transcript of megabytes of digit words', () => {
  /** About `size` characters of `units` in turn: near-misses of A spoken, and what a run is made of. */
  function hostile(size: number): string {
    const units = [
      'zero one seven zero one two three four five six seven eight, ',
      'zero one seven zero, one two three four five six eight; ',
      'one, one, one, one, one, one, one, one, ',
      'o-o-o-o-o-o-o-o-o ',
      'double triple doppel double double one ',
      'plus plus + + plus ',
      'phone someone onee zweii ',
      'null,null,null,null,',
      '0170 one 0170 one 1 one 2 two ',
      'fu\u0308nf fünf fuenf ',
      'twenty twenty-one hundred and thousand and seventeen ninety-nine hundred ',
      'einundzwanzigtausendeinhundert dreihundertzwölf und und hundert tausend ',
      'neunzehnhundertneunundneunzig zweiundzwanzigzwanzig einundeinund ',
      'one hundred and and and one thousand one hundred one ',
    ];
    const parts: string[] = [];
    for (let length = 0, i = 0; length < size; i++) {
      // Long runs too: a unit many times over before the next.
      const part = units[i % units.length]!.repeat(1 + (i % 7) * 500);
      parts.push(part);
      length += part.length;
    }
    return parts.join('');
  }

  test(
    'read to its end in linear time: the number said at the end is found, near-misses alone are not',
    { timeout: 120_000 },
    () => {
      const text = hostile(4 * 1024 * 1024);
      const finds = finder(A);
      assert.ok(!finds(text), 'the near-misses alone');
      assert.ok(
        finds(`${text} my number is zero one seven zero, one two three four five six seven.`),
        'the number at the end',
      );
    },
  );
});
