// ECharts with only the modules the dashboard uses (keeps the bundle small).
import * as echarts from 'echarts/core'
import { BarChart, LineChart } from 'echarts/charts'
import { DataZoomComponent, GridComponent, LegendComponent, TooltipComponent } from 'echarts/components'
import { CanvasRenderer } from 'echarts/renderers'

echarts.use([LineChart, BarChart, GridComponent, TooltipComponent, LegendComponent, DataZoomComponent, CanvasRenderer])

export { echarts }
export type EChartsType = ReturnType<typeof echarts.init>

/** The series palette of every chart (line charts, metric panels, usage). */
export const SERIES_COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777', '#4b5563', '#65a30d']

/**
 * A colour per numeric id (a user's id) that stays the same whatever else a chart shows: the id picks its colour of
 * the palette, the next free one when a smaller id took it.
 */
export function stableColors(ids: number[]): Map<number, string> {
  const out = new Map<number, string>()
  const taken = new Set<string>()
  const n = SERIES_COLORS.length
  for (const id of [...new Set(ids)].sort((a, b) => a - b)) {
    const start = (((id - 1) % n) + n) % n
    let color = SERIES_COLORS[start]
    for (let i = 0; i < n && taken.has(color); i++) color = SERIES_COLORS[(start + i) % n]
    taken.add(color)
    out.set(id, color)
  }
  return out
}
