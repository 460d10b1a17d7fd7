// Vite build of Favlo's web UI.
//
// Key design choice: no framework plugin. Preact's JSX goes through esbuild's
// automatic runtime, so the toolchain is Vite + esbuild only. The dev and
// preview servers proxy the public API to a running `favlo serve` given by
// FAVLO_URL, so the built files can be tried before the binary embeds them.
import { defineConfig } from 'vite';

const target = process.env.FAVLO_URL ?? 'http://127.0.0.1:8129';
const proxy = Object.fromEntries(
  ['/v1', '/health', '/metrics', '/mcp'].map((p) => [p, { target, changeOrigin: false }]),
);

export default defineConfig({
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false, target: 'es2022' },
  server: { proxy },
  preview: { proxy },
});
