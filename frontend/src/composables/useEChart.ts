// One ECharts instance bound to the component's template ref `refName` for the life of the component: created on
// mount, resized with its container, re-rendered when `source` changes, disposed on unmount. `render(chart)` sets
// the options.
import { onBeforeUnmount, onMounted, shallowRef, useTemplateRef, watch, type WatchSource } from 'vue'
import { echarts, type EChartsType } from '../charts'

export function useEChart(refName: string, source: WatchSource, render: (chart: EChartsType) => void): void {
  const el = useTemplateRef<HTMLDivElement>(refName)
  const chart = shallowRef<EChartsType | null>(null)
  let observer: ResizeObserver | null = null

  const draw = () => {
    if (chart.value) render(chart.value)
  }

  onMounted(() => {
    if (!el.value) return
    chart.value = echarts.init(el.value)
    draw()
    observer = new ResizeObserver(() => chart.value?.resize())
    observer.observe(el.value)
  })

  watch(source, draw, { deep: true })

  onBeforeUnmount(() => {
    observer?.disconnect()
    chart.value?.dispose()
    chart.value = null
  })
}
