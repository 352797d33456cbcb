// The launch form is generated from the training config's JSON Schema (GET /config/schema): one field per schema
// property, typed from the schema (enum -> select, boolean -> checkbox, number/integer -> number input, nested
// object -> a group, free-form objects and unions -> a JSON/YAML text), help text from `description`, defaults as
// placeholders. The config object holds only what the user set (as in a YAML file); the server fills defaults in.

export type Schema = Record<string, any> // eslint-disable-line @typescript-eslint/no-explicit-any

export type FieldKind = 'string' | 'number' | 'integer' | 'boolean' | 'enum' | 'group' | 'json'

export interface FieldSpec {
  key: string
  path: string[]
  label: string
  kind: FieldKind
  description: string
  required: boolean
  nullable: boolean
  default?: unknown
  options?: string[]
  min?: number
  max?: number
  children?: FieldSpec[]
  /** Shown when the field is empty instead of "default <value>" (e.g. "from generation: 16"). */
  placeholder?: string
}

export function resolveRef(root: Schema, schema: Schema | undefined): Schema {
  let s = schema ?? {}
  for (let i = 0; i < 10 && typeof s.$ref === 'string'; i++) {
    const name = s.$ref.split('/').pop() as string
    s = { ...root.$defs?.[name], ...Object.fromEntries(Object.entries(s).filter(([k]) => k !== '$ref')) }
  }
  return s
}

/** `anyOf: [X, {type: null}]` -> X, nullable. */
function unwrap(root: Schema, schema: Schema): { schema: Schema; nullable: boolean } {
  const s = resolveRef(root, schema)
  if (Array.isArray(s.anyOf)) {
    const options = s.anyOf.filter((o: Schema) => o.type !== 'null')
    const nullable = options.length < s.anyOf.length
    if (options.length === 1) {
      const inner = resolveRef(root, options[0])
      return { schema: { ...inner, description: s.description ?? inner.description, default: s.default }, nullable }
    }
    return { schema: { ...s, anyOf: options }, nullable }
  }
  return { schema: s, nullable: false }
}

function label(key: string): string {
  return key.replace(/_/g, ' ')
}

export function fieldFor(root: Schema, key: string, raw: Schema, path: string[], required: boolean): FieldSpec {
  const { schema, nullable } = unwrap(root, raw)
  const base = {
    key,
    path: [...path, key],
    label: label(key),
    description: String(schema.description ?? ''),
    required,
    nullable,
    default: schema.default,
  }
  const num = (v: unknown) => (typeof v === 'number' ? v : undefined)
  if (Array.isArray(schema.enum)) return { ...base, kind: 'enum', options: schema.enum.map(String) }
  if (schema.type === 'boolean') return { ...base, kind: 'boolean' }
  if (schema.type === 'integer' || schema.type === 'number') {
    return {
      ...base,
      kind: schema.type,
      min: num(schema.minimum) ?? num(schema.exclusiveMinimum),
      max: num(schema.maximum) ?? num(schema.exclusiveMaximum),
    }
  }
  if (schema.type === 'string') return { ...base, kind: 'string' }
  if (schema.type === 'object' && schema.properties && !schema.additionalProperties) {
    return { ...base, kind: 'group', children: fieldsOf(root, schema, [...path, key]) }
  }
  return { ...base, kind: 'json' }
}

export function fieldsOf(root: Schema, objectSchema: Schema, path: string[] = []): FieldSpec[] {
  const s = resolveRef(root, objectSchema)
  const required = new Set<string>(s.required ?? [])
  return Object.entries((s.properties ?? {}) as Record<string, Schema>).map(([key, prop]) =>
    fieldFor(root, key, prop, path, required.has(key)),
  )
}

/** The algorithm section's schema for one algorithm name (the schema's discriminator). */
export function algorithmSchema(root: Schema, name: string): Schema | null {
  const mapping = root.properties?.algorithm?.discriminator?.mapping ?? {}
  const ref = mapping[name]
  return ref ? resolveRef(root, { $ref: ref }) : null
}

export function algorithmNames(root: Schema): string[] {
  return Object.keys(root.properties?.algorithm?.discriminator?.mapping ?? {})
}

/** A copy of `obj` with `path` set to `value`; `undefined` removes the key (and empty parents). */
export function setIn(obj: Record<string, unknown>, path: (string | number)[], value: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = JSON.parse(JSON.stringify(obj ?? {}))
  let node: Record<string, unknown> = out
  const parents: [Record<string, unknown>, string][] = []
  for (const part of path.slice(0, -1)) {
    const key = String(part)
    if (node[key] === null || typeof node[key] !== 'object') node[key] = {}
    parents.push([node, key])
    node = node[key] as Record<string, unknown>
  }
  const last = String(path[path.length - 1])
  if (value === undefined) delete node[last]
  else node[last] = value
  for (let i = parents.length - 1; i >= 0; i--) {
    const [parent, key] = parents[i]
    const child = parent[key]
    if (child && typeof child === 'object' && !Array.isArray(child) && Object.keys(child).length === 0) delete parent[key]
  }
  return out
}

export function getIn(obj: unknown, path: (string | number)[]): unknown {
  let node = obj
  for (const part of path) {
    if (node === null || typeof node !== 'object') return undefined
    node = (node as Record<string, unknown>)[String(part)]
  }
  return node
}

/** Field errors from POST /jobs/validate, keyed by their dotted path (`rewards.0.weight`). */
export function errorsByPath(errors: { loc: (string | number)[] | string; msg: string }[]): Record<string, string> {
  const out: Record<string, string> = {}
  for (const e of errors) {
    const key = Array.isArray(e.loc) ? e.loc.join('.') : e.loc
    out[key] = out[key] ? `${out[key]}; ${e.msg}` : e.msg
  }
  return out
}

/** The placeholder of an empty field: its default, worded so that it does not look like a value. */
export function defaultText(spec: FieldSpec): string {
  if (spec.placeholder !== undefined) return spec.placeholder
  if (spec.default === undefined || spec.default === null) return ''
  return `default ${typeof spec.default === 'object' ? JSON.stringify(spec.default) : String(spec.default)}`
}

/** Each registered benchmark's options schema (GET /evaluations/schema: `benchmarks` items discriminated by name). */
export function benchmarkSchemas(root: Schema): Record<string, Schema> {
  const items = resolveRef(root, root.properties?.benchmarks?.items)
  const union = (items.anyOf ?? [items]).find((o: Schema) => o.discriminator?.mapping) ?? {}
  const mapping: Record<string, string> = union.discriminator?.mapping ?? {}
  return Object.fromEntries(Object.entries(mapping).map(([name, ref]) => [name, resolveRef(root, { $ref: ref })]))
}

/** The errors left once the field at `path` changed: its own, those under it and those of its parents (a rule
 * over several fields is reported at their parent) are dropped. */
export function clearErrorsAt(errors: Record<string, string>, path: (string | number)[]): Record<string, string> {
  const key = path.join('.')
  const parents = path.slice(0, -1).map((_, i) => path.slice(0, i + 1).join('.'))
  return Object.fromEntries(
    Object.entries(errors).filter(([loc]) => loc !== key && !loc.startsWith(`${key}.`) && !parents.includes(loc)),
  )
}

/** The messages of the errors under `path` (a free-form field shows its inner fields' errors), `sub.key: msg`. */
export function errorsUnder(errors: Record<string, string>, path: string): string {
  return Object.entries(errors)
    .filter(([loc]) => loc.startsWith(`${path}.`))
    .map(([loc, msg]) => `${loc.slice(path.length + 1)}: ${msg}`)
    .join('; ')
}
