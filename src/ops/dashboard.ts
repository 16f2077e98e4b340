// Bull Board on Hono: every queue, its counts, failed jobs with their error, retry and remove.
// Mounted under /admin/queues behind operatorAuth (see ./app.ts).
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { HonoAdapter } from '@bull-board/hono';
import { serveStatic } from '@hono/node-server/serve-static';
import type { Queue } from 'bullmq';
import type { Hono } from 'hono';

export interface DashboardOptions {
  queues: Queue[];
  /** Where it is mounted, e.g. /admin/queues (app.ts' DASHBOARD_PATH). */
  basePath: string;
  /** Shown in the header. Default `callsync`. */
  title?: string;
}

export function createDashboard(options: DashboardOptions): Hono {
  const basePath = options.basePath;
  const serverAdapter = new HonoAdapter(serveStatic).setBasePath(basePath);
  createBullBoard({
    queues: options.queues.map((q) => new BullMQAdapter(q, { displayName: q.name })),
    // @bull-board/hono pins its own copy of @bull-board/api; the two copies' types differ only nominally.
    serverAdapter: serverAdapter as unknown as Parameters<typeof createBullBoard>[0]['serverAdapter'],
    options: { uiConfig: { boardTitle: options.title ?? 'callsync' } },
  });
  return serverAdapter.registerPlugin() as unknown as Hono;
}
