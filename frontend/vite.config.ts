import { defineConfig } from 'vite'
import vue from '@vitejs/plugin-vue'

// The API (uvicorn, `tp up --port 8765`) serves the built app at /ui/ on the same origin.
const API = process.env.TP_API_URL ?? 'http://127.0.0.1:8765'

export default defineConfig({
  base: '/ui/',
  plugins: [vue()],
  build: {
    outDir: '../training_platform/api/static/ui',
    emptyOutDir: true,
    chunkSizeWarningLimit: 900,
    rollupOptions: {
      output: {
        // ECharts (the largest part) in its own file, so it is cached across releases of the app code.
        manualChunks: (id) =>
          /node_modules\/(echarts|zrender)\/|\/src\/charts\.ts$/.test(id) ? 'echarts' : undefined,
      },
    },
  },
  server: { port: 5173, proxy: { '/api': { target: API, changeOrigin: true } } },
  preview: { port: 4173, proxy: { '/api': { target: API, changeOrigin: true } } },
})
