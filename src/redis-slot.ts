// The Redis Cluster slot of a key (CRC16 of its hash tag), for the sink state's scripts and the
// key layout (queues/keys.ts): pure, so it sits at the bottom of the layers.

function crc16(data: Buffer): number {
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The Redis Cluster slot of `key`: CRC16 of its hash tag (the first non-empty `{…}`), or of the whole key. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  return crc16(Buffer.from(key)) % 16384;
}
