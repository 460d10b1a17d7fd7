// Launching Debian's chromium through playwright-core (no browser download).
//
// Key design choice: a fresh user-data-dir per context, so localStorage and
// caches never leak between runs or between the two viewports.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';

export const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
];

export interface Launched {
  context: BrowserContext;
  close: () => Promise<void>;
}

export async function launch(viewport: { width: number; height: number }): Promise<Launched> {
  const dir = mkdtempSync(join(tmpdir(), 'favlo-ui-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport,
    deviceScaleFactor: 1,
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
