// Types for report.mjs, for the unit test that imports it.
export interface Target {
  text: string;
  ok?: boolean;
  unmeasured?: boolean;
}
export interface Row {
  bench: string;
  name: string;
  unit: string;
  samples: number[];
  summary: { n: number; median: number; p10: number; p90: number; min: number; max: number; mean: number };
  target?: Target;
  note?: string;
}
export class Report {
  rows: Row[];
  add(r: {
    bench: string;
    name: string;
    unit: string;
    samples: number[];
    baseline?: { name: string; samples: number[]; paired?: boolean };
    target?: Target;
    note?: string;
    raw?: unknown;
  }): Row;
  note(text: string): void;
  table(): string;
  write(file: string, meta: unknown): void;
}
