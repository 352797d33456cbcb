import { defineStore } from 'pinia'
import { ref } from 'vue'
import { api } from '../api'
import type { Job } from '../types'

export const JOB_SORTS = ['-created_at', 'created_at', '-priority', 'priority', 'status'] as const

/** The jobs table's filters, sort and page: mirrored in the URL (#/jobs?status=running&q=sft&offset=20). */
export interface JobFilters {
  status: string
  q: string
  algorithm: string
  engine: string
  kind: string
  owner: string
  tag: string
  /** metric columns shown, comma-separated: loss, eval, reward */
  cols: string
  sort: string
  offset: number
}

export const EMPTY_FILTERS: JobFilters = {
  status: '', q: '', algorithm: '', engine: '', kind: '', owner: '', tag: '', cols: '', sort: '-created_at', offset: 0,
}

export const useJobsStore = defineStore('jobs', () => {
  const items = ref<Job[]>([])
  const total = ref(0)
  const limit = ref(20)
  const filters = ref<JobFilters>({ ...EMPTY_FILTERS })
  const loaded = ref(false)

  async function fetchList(): Promise<void> {
    const f = filters.value
    const page = await api.listJobs({
      status: f.status || undefined,
      q: f.q || undefined,
      algorithm: f.algorithm || undefined,
      engine: f.engine || undefined,
      kind: f.kind || undefined,
      owner: f.owner || undefined,
      tag: f.tag || undefined,
      sort: f.sort,
      limit: limit.value,
      offset: f.offset,
    })
    // A page emptied by deletions: step back to the last page that has rows.
    if (page.items.length === 0 && page.total > 0 && f.offset > 0) {
      filters.value = { ...f, offset: Math.max(0, Math.floor((page.total - 1) / limit.value) * limit.value) }
      return fetchList()
    }
    items.value = page.items
    total.value = page.total
    loaded.value = true
  }

  async function create(name: string, config: Record<string, unknown>, priority: number): Promise<Job> {
    return api.createJob({ name, config, priority })
  }

  return { items, total, limit, filters, loaded, fetchList, create }
})
