// A call-data webhook as the platform sends it (spec format v2, synthetic data), for `send-sample`.
export function samplePayload(now = new Date()): Record<string, unknown> {
  const end = now.getTime();
  const start = end - 95_000;
  return {
    version: 'v2',
    call: {
      id: `sample-${now.toISOString().replace(/[-:.]/g, '').replace('T', '-').slice(0, 15)}-${Math.random().toString(16).slice(2, 6)}`,
      from: '+4930901820',
      to: '+4940809010',
      startTime: start,
      endTime: end,
      duration: 95,
      direction: 'in',
      users: [{ userId: 'w0', fullName: 'Sample Agent' }],
    },
    assist: {
      summary: {
        content: 'Sample call sent by `callsync send-sample`: the caller asked for the opening hours.',
        keyPoints: ['Opening hours given: Mon-Fri 9:00-17:00'],
        topics: ['opening hours'],
      },
      transcription: {
        content: 'Caller: Hello, when are you open?\nCallee: Monday to Friday, nine to five.',
        chunks: [
          { speaker: 'caller', startTime: start + 2000, endTime: start + 4000, content: 'Hello, when are you open?' },
          { speaker: 'callee', startTime: start + 5000, endTime: start + 8000, content: 'Monday to Friday, nine to five.' },
        ],
      },
    },
  };
}
