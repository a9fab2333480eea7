// Type used by the dashboard check (tests/stack/stack_check.py tsc writes one .gen/run-<pid>/<name>.ts per dashboard:
// `export const dashboard: JsonOf<Dashboard> = <the JSON file's content>;` and runs tsc over them).
//
// Assigning the JSON as an object literal to the @grafana/schema type makes tsc check every field's type and
// reject unknown keys (excess property checks). JSON cannot hold TypeScript enum values, so string enums
// (ThresholdsMode, FieldColorModeId, ...) are widened to the union of their string values; numeric enums
// already accept the matching number literals.
export type JsonOf<T> =
  T extends string ? (string extends T ? T : `${T}`)
  : T extends number | boolean | null | undefined ? T
  : T extends Array<infer U> ? Array<JsonOf<U>>
  : T extends object ? { [K in keyof T]: JsonOf<T[K]> }
  : T;
