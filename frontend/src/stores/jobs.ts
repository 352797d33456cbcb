import { defineStore } from 'pinia'
import { ref } from 'vue'
import { api } from '../api'
import type { Job } from '../types'

export const useJobsStore = defineStore('jobs', () => {
  // The jobs table: its filter and page survive leaving and coming back.
  const items = ref<Job[]>([])
  const total = ref(0)
  const limit = ref(20)
  const offset = ref(0)
  const status = ref('')
  const loaded = ref(false)

  async function fetchList(): Promise<void> {
    const page = await api.listJobs({ status: status.value || undefined, limit: limit.value, offset: offset.value })
    // A page emptied by deletions: step back to the last page that has rows.
    if (page.items.length === 0 && page.total > 0 && offset.value > 0) {
      offset.value = Math.max(0, Math.floor((page.total - 1) / limit.value) * limit.value)
      return fetchList()
    }
    items.value = page.items
    total.value = page.total
    loaded.value = true
  }

  async function create(name: string, config: Record<string, unknown>, priority: number): Promise<Job> {
    return api.createJob({ name, config, priority })
  }

  return { items, total, limit, offset, status, loaded, fetchList, create }
})
