// A JSON parser that refuses what JSON.parse lets through silently: a key twice in one object
// (`{"sink":"a","sink":"a"}`: JSON.parse keeps the last, strict consumers reject the line).
export function parseStrictJson(text: string): unknown {
  let i = 0;
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at ${i} in ${text.slice(0, 200)}`);
  };
  const string = (): string => {
    // eslint-disable-next-line no-control-regex -- raw control characters are not allowed in a JSON string
    const m = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(text.slice(i));
    if (!m) return fail('expected a string');
    i += m[0].length;
    return JSON.parse(m[0]) as string;
  };
  const value = (): unknown => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const out: Record<string, unknown> = {};
      const seen = new Set<string>();
      ws();
      if (text[i] === '}') return (i++, out);
      for (;;) {
        ws();
        const key = string();
        if (seen.has(key)) fail(`duplicate key "${key}"`);
        seen.add(key);
        ws();
        if (text[i++] !== ':') fail('expected ":"');
        out[key] = value();
        ws();
        const next = text[i++];
        if (next === '}') return out;
        if (next !== ',') fail('expected "," or "}"');
      }
    }
    if (c === '[') {
      i++;
      const out: unknown[] = [];
      ws();
      if (text[i] === ']') return (i++, out);
      for (;;) {
        out.push(value());
        ws();
        const next = text[i++];
        if (next === ']') return out;
        if (next !== ',') fail('expected "," or "]"');
      }
    }
    if (c === '"') return string();
    const m = /^(?:true|false|null|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)/.exec(text.slice(i));
    if (!m) return fail('unexpected token');
    i += m[0].length;
    return JSON.parse(m[0]) as unknown;
  };
  const result = value();
  ws();
  if (i !== text.length) fail('trailing text');
  return result;
}
