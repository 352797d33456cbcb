// Server-Sent Events over fetch: EventSource cannot send the Authorization header our API needs.
import { API_BASE, getToken } from './api'

export interface SseEvent {
  event: string
  data: string
}

/** Reads `path` as an event stream, calling `onEvent` per event, until the server ends it or `signal` aborts. */
export async function streamSse(
  path: string,
  onEvent: (e: SseEvent) => void,
  signal: AbortSignal,
  body?: unknown,
): Promise<void> {
  const headers: Record<string, string> = { Accept: 'text/event-stream' }
  const token = getToken()
  if (token) headers.Authorization = `Bearer ${token}`
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  const res = await fetch(API_BASE + path, {
    method: body === undefined ? 'GET' : 'POST',
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  })
  if (!res.ok || !res.body) {
    // A refused request answers JSON ({detail}): its message is what the user needs.
    const text = await res.text().catch(() => '')
    let detail = text
    try {
      const parsed = JSON.parse(text)
      detail = typeof parsed.detail === 'string' ? parsed.detail : JSON.stringify(parsed.detail)
    } catch {
      /* not JSON */
    }
    throw new Error(`HTTP ${res.status}: ${detail || path}`)
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ''
  let event = 'message'
  let data: string[] = []
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffer += value
    let nl: number
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '')
      buffer = buffer.slice(nl + 1)
      if (line === '') {
        if (data.length) onEvent({ event, data: data.join('\n') })
        event = 'message'
        data = []
      } else if (line.startsWith('data:')) {
        data.push(line.slice(line.startsWith('data: ') ? 6 : 5))
      } else if (line.startsWith('event:')) {
        event = line.slice(6).trim()
      }
    }
  }
}

/** Downloads an authenticated API file (a plain link would not carry the token). */
export async function downloadFile(path: string, filename: string): Promise<void> {
  const headers: Record<string, string> = {}
  const token = getToken()
  if (token) headers.Authorization = `Bearer ${token}`
  const res = await fetch(API_BASE + path, { headers })
  if (!res.ok) throw new Error(res.status === 404 ? `${filename} does not exist (yet)` : `HTTP ${res.status}`)
  const url = URL.createObjectURL(await res.blob())
  const a = document.createElement('a')
  a.href = url
  a.download = filename
  document.body.appendChild(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(url), 10_000)
}
