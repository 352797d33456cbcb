import { defineStore } from 'pinia'
import { ref } from 'vue'
import { api } from '../api'
import type {
  Dataset, DatasetOperation, DatasetOperationInfo, DatasetVersion, IngestQueued, IngestResult, Job,
} from '../types'
import { ACTIVE_STATUSES } from '../types'

export const useDatasetsStore = defineStore('datasets', () => {
  // The datasets table: its search and page survive leaving and coming back.
  const items = ref<Dataset[]>([])
  const total = ref(0)
  const limit = ref(20)
  const offset = ref(0)
  const q = ref('')
  const loaded = ref(false)
  /**
   * Versions by id: the list endpoint gives only `current_version_id`, so the table's rows/size/format come from
   * one request per current version. Versions are immutable: each is fetched once.
   */
  const versions = ref<Record<number, DatasetVersion>>({})

  /** The server's registered operations (GET /datasets/operations: names, help, params schemas, examples). */
  const operations = ref<Record<DatasetOperation, DatasetOperationInfo>>({})
  let operationsLoad: Promise<void> | null = null

  /** Load the operations once (a failure lets the next call try again). */
  function fetchOperations(): Promise<void> {
    operationsLoad ??= api.listDatasetOperations().then(
      (ops) => {
        operations.value = ops
      },
      (err: unknown) => {
        operationsLoad = null
        throw err
      },
    )
    return operationsLoad
  }

  /** The params example of an operation, prefilled in the "Run operation" form; `format` is the input version's. */
  function operationExample(op: DatasetOperation, format: string | null = null): Record<string, unknown> {
    const info = operations.value[op]
    if (!info) return {}
    return (format != null ? info.example_by_format[format] : undefined) ?? info.example
  }

  function remember(v: DatasetVersion): void {
    versions.value[v.id] = v
  }

  async function fetchList(): Promise<void> {
    const page = await api.listDatasets({ q: q.value.trim() || undefined, limit: limit.value, offset: offset.value })
    // A page emptied by deletions: step back to the last page that has rows.
    if (page.items.length === 0 && page.total > 0 && offset.value > 0) {
      offset.value = Math.max(0, Math.floor((page.total - 1) / limit.value) * limit.value)
      return fetchList()
    }
    items.value = page.items
    total.value = page.total
    loaded.value = true
    const missing = page.items.filter((d) => d.current_version_id != null && !(d.current_version_id in versions.value))
    await Promise.all(
      missing.map((d) =>
        api
          .getVersion(d.id, d.current_version_id as number)
          .then(remember)
          .catch(() => undefined), // the table shows "—"; the dataset page reports the error
      ),
    )
  }

  /** Upload (202: the file is staged) and the ingest job that follows. */
  async function upload(fields: Parameters<typeof api.uploadDataset>[0]): Promise<IngestQueued> {
    return api.uploadDataset(fields)
  }

  /** Wait for a data job to end (polls every second); its final state. */
  async function waitJob(jobId: number, onPoll?: (job: Job) => void): Promise<Job> {
    for (;;) {
      const job = await api.getJob(jobId)
      onPoll?.(job)
      if (!ACTIVE_STATUSES.includes(job.status)) return job
      await new Promise((resolve) => setTimeout(resolve, 1000))
    }
  }

  function ingestResult(job: Job): IngestResult | null {
    const result = (job.config as { result?: IngestResult } | null)?.result
    return result ?? null
  }

  async function runOperation(
    datasetId: number,
    versionId: number,
    operation: DatasetOperation,
    params: Record<string, unknown>,
    extra: { name?: string; priority?: number } = {},
  ): Promise<Job> {
    return api.createOperation(datasetId, versionId, { operation, params, ...extra })
  }

  return {
    items, total, limit, offset, q, loaded, versions, operations, remember, fetchList, fetchOperations, operationExample,
    upload, waitJob, ingestResult, runOperation,
  }
})
