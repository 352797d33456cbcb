import yaml from 'js-yaml'

/** Parses a YAML or JSON text (YAML is a superset of JSON) into an object; throws Error with a readable message. */
export function parseObject(text: string, what = 'config'): Record<string, unknown> {
  const src = text.trim()
  if (!src) throw new Error(`${what} is empty`)
  let value: unknown
  try {
    value = src.startsWith('{') || src.startsWith('[') ? JSON.parse(src) : yaml.load(src, { schema: yaml.CORE_SCHEMA })
  } catch (err) {
    if (err instanceof SyntaxError && !(src.startsWith('{') || src.startsWith('['))) throw err
    if (err instanceof SyntaxError) {
      // Not strict JSON: give YAML (flow style) a try before giving up.
      try {
        value = yaml.load(src, { schema: yaml.CORE_SCHEMA })
      } catch {
        throw new Error(`invalid JSON: ${err.message}`)
      }
    } else {
      const msg = err instanceof Error ? err.message : String(err)
      throw new Error(`invalid YAML: ${msg.split('\n')[0]}`)
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Error(`${what} must be a mapping (an object), got ${Array.isArray(value) ? 'a list' : typeof value}`)
  }
  return value as Record<string, unknown>
}

/** Parses a JSON (or YAML) value of any type. */
export function parseValue(text: string, what: string): unknown {
  const src = text.trim()
  if (!src) return undefined
  try {
    return JSON.parse(src)
  } catch (err) {
    try {
      return yaml.load(src, { schema: yaml.CORE_SCHEMA })
    } catch {
      throw new Error(`${what}: invalid JSON (${err instanceof Error ? err.message : err})`)
    }
  }
}
