// Display helpers: numbers, sizes, times.

export function fmtMetric(v: number | null | undefined, digits = 4): string {
  if (v === null || v === undefined || Number.isNaN(v)) return '—'
  if (!Number.isFinite(v)) return String(v)
  const a = Math.abs(v)
  // Large whole numbers (token counts, steps) read better without decimals.
  if (Number.isInteger(v) && a >= 1000 && a < 1e12) return String(v)
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3)
  return v.toFixed(digits)
}

export function fmtMB(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) return '—'
  const mb = bytes / 1024 / 1024
  return `${mb < 10 ? mb.toFixed(2) : mb.toFixed(1)} MB`
}

export function fmtMbValue(mb: number | null | undefined): string {
  if (mb === null || mb === undefined) return '—'
  return mb >= 10240 ? `${(mb / 1024).toFixed(1)} GB` : `${Math.round(mb)} MB`
}

export function fmtPercent(p: number | null | undefined): string {
  if (p === null || p === undefined) return '—'
  return `${p.toFixed(1)}%`
}

export function fmtTime(iso: string | null | undefined): string {
  if (!iso) return '—'
  const d = new Date(iso)
  if (Number.isNaN(d.getTime())) return iso
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
}

export function fmtAgo(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '—'
  const t = new Date(iso).getTime()
  if (Number.isNaN(t)) return iso
  const s = Math.round((now - t) / 1000)
  if (s < 0) return `in ${fmtSeconds(-s)}`
  if (s < 5) return 'just now'
  return `${fmtSeconds(s)} ago`
}

export function fmtSeconds(total: number): string {
  total = Math.max(0, Math.round(total))
  if (total < 60) return `${total}s`
  const m = Math.floor(total / 60)
  const s = total % 60
  if (m < 60) return s ? `${m}m ${s}s` : `${m}m`
  const h = Math.floor(m / 60)
  if (h < 48) return `${h}h ${m % 60}m`
  return `${Math.floor(h / 24)}d ${h % 24}h`
}

export function fmtDuration(start: string | null | undefined, end: string | null | undefined): string {
  if (!start) return '—'
  const a = new Date(start).getTime()
  const b = end ? new Date(end).getTime() : Date.now()
  if (Number.isNaN(a) || Number.isNaN(b)) return '—'
  return fmtSeconds((b - a) / 1000)
}

export function truncate(text: string | null | undefined, n: number): string {
  if (!text) return ''
  return text.length > n ? `${text.slice(0, n)}…` : text
}

/** Short axis labels: 3 significant digits, no trailing zeros (7, 0.25, 1.2e-5). */
export function fmtAxis(v: number): string {
  if (!Number.isFinite(v)) return String(v)
  const a = Math.abs(v)
  if (a === 0) return '0'
  if (a >= 1e6 || a < 1e-3) return v.toExponential(1)
  if (Number.isInteger(v)) return String(v)
  return String(Number(v.toPrecision(3)))
}

/** File sizes: 812 B, 34.0 KB, 1.25 MB, 3.4 GB (1024-based). */
export function fmtBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || Number.isNaN(bytes)) return '—'
  if (bytes < 1024) return `${bytes} B`
  const units = ['KB', 'MB', 'GB', 'TB']
  let v = bytes / 1024
  let i = 0
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024
    i++
  }
  return `${v < 10 ? v.toFixed(2) : v.toFixed(1)} ${units[i]}`
}

/** Counts with thousands separators: 12,345. */
export function fmtCount(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return '—'
  return n.toLocaleString('en-US')
}

/** What "±" means on every page: one standard error (of a mean over items, or over seeds for a sweep point). */
export const PM_MEANING = '± one standard error of the mean'

/** "0.420 ± 0.031" (± = standard error), or the value alone when there is none. */
export function fmtPm(value: number | null | undefined, stderr: number | null | undefined): string {
  return stderr == null || !Number.isFinite(stderr) ? fmtMetric(value) : `${fmtMetric(value)} ± ${fmtMetric(stderr)}`
}

/** A difference with its sign: +0.12, −0.05 (a true minus sign), 0. */
export function fmtSigned(v: number): string {
  return `${v > 0 ? '+' : v < 0 ? '−' : ''}${fmtMetric(Math.abs(v))}`
}

/** Hours of device or CPU time: 0, 0.0031, 2.50, 812.4 (two significant digits under 0.1 h, so a short run is not "0.00"). */
export function fmtHours(h: number | null | undefined): string {
  if (h === null || h === undefined || Number.isNaN(h)) return '—'
  const a = Math.abs(h)
  if (a === 0) return '0'
  if (a < 0.1) return String(Number(h.toPrecision(2)))
  return a < 100 ? h.toFixed(2) : h.toFixed(1)
}

/** A cost (device-hours x price, no currency): 0, 0.0042, 12.50. */
export function fmtCost(v: number | null | undefined): string {
  if (v === null || v === undefined || Number.isNaN(v)) return '—'
  if (v !== 0 && Math.abs(v) < 0.01) return String(Number(v.toPrecision(2)))
  return v.toFixed(2)
}

/** A quota limit: the number as set, or "no limit" for null. */
export function fmtLimit(v: number | null | undefined): string {
  return v === null || v === undefined ? 'no limit' : String(v)
}
