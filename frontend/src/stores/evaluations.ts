import { defineStore } from 'pinia'
import { ref } from 'vue'
import { api } from '../api'
import type { BenchmarkInfo, Evaluation, Leaderboard } from '../types'

export const useEvaluationsStore = defineStore('evaluations', () => {
  const items = ref<Evaluation[]>([])
  const total = ref(0)
  const limit = ref(20)
  const offset = ref(0)
  const loaded = ref(false)

  const benchmark = ref<string>('gsm8k')
  const leaderboard = ref<Leaderboard | null>(null)
  /** The server's benchmark registry (loaded once): a new benchmark needs no change here. */
  const benchmarks = ref<BenchmarkInfo[]>([])

  async function fetchBenchmarks(): Promise<void> {
    if (!benchmarks.value.length) benchmarks.value = await api.listBenchmarks()
  }

  async function fetchList(): Promise<void> {
    const page = await api.listEvaluations({ limit: limit.value, offset: offset.value })
    items.value = page.items
    total.value = page.total
    loaded.value = true
  }

  async function fetchLeaderboard(): Promise<void> {
    leaderboard.value = await api.leaderboard(benchmark.value, { limit: 50 })
  }

  async function create(body: Record<string, unknown>): Promise<Evaluation> {
    return api.createEvaluation(body)
  }

  return {
    items,
    total,
    limit,
    offset,
    loaded,
    benchmark,
    leaderboard,
    benchmarks,
    fetchList,
    fetchLeaderboard,
    fetchBenchmarks,
    create,
  }
})
