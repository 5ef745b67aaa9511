/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The bundle goes into the Python package, which serves it at "/" (see docs/webapp.md).
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "../src/nodeloom/web_dist",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
    // Two pages: the web app, and a workflow app's page for visitors (its own small entry).
    rollupOptions: { input: { main: "index.html", app: "app.html" } },
  },
  server: {
    proxy: {
      "/api": { target: "http://127.0.0.1:8000", ws: true },
    },
  },
  test: {
    // Unit tests (*.test.ts) run in Node; component tests (*.test.tsx) ask for jsdom in their
    // first line and render with Testing Library.
    include: ["src/**/*.test.{ts,tsx}"],
    environment: "node",
    setupFiles: ["src/testing/setup.ts"],
    // Queries by role and name walk the accessibility tree in jsdom: a few seconds per test
    // on a busy 2-core machine, so the 5 s default would fail for load, not for a defect.
    testTimeout: 30_000,
  },
});
