// What an OTLP/HTTP trace collector received (test/helpers/http-receiver.ts's requests to
// /v1/traces), decoded from either encoding into one shape: OTLP/JSON as the specification
// writes it, and OTLP/protobuf read field by field from the wire format with the numbers of
// opentelemetry-proto's trace.proto (only the fields a test looks at; the others are skipped).
import type { ReceivedRequest } from './http-receiver.js';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  startMs: number;
  endMs: number;
  /** Values as strings (ints, bools and doubles too), as both encodings can carry them. */
  attributes: Record<string, string>;
  resource: Record<string, string>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
  /** 'json' or 'protobuf': the request's encoding. */
  encoding: string;
}

/** Every span of every /v1/traces request in `requests`. */
export function receivedSpans(requests: ReceivedRequest[]): ReceivedSpan[] {
  return requests
    .filter((r) => r.path === '/v1/traces')
    .flatMap((r) =>
      String(r.headers['content-type']).includes('json') ? fromJson(r.text ?? '{}') : fromProtobuf(r.body),
    );
}

interface JsonKeyValue {
  key: string;
  value: Record<string, unknown>;
}
interface JsonBody {
  resourceSpans: Array<{
    resource?: { attributes?: JsonKeyValue[] };
    scopeSpans: Array<{
      spans: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        startTimeUnixNano: string | number;
        endTimeUnixNano: string | number;
        attributes?: JsonKeyValue[];
        status?: { code?: number };
      }>;
    }>;
  }>;
}

const jsonAttributes = (kvs: JsonKeyValue[] = []): Record<string, string> =>
  Object.fromEntries(
    kvs.map((a) => [
      a.key,
      String(a.value.stringValue ?? a.value.intValue ?? a.value.boolValue ?? a.value.doubleValue),
    ]),
  );

const nanosToMs = (n: string | number | bigint): number => Number(BigInt(n) / 1_000_000n);

function fromJson(text: string): ReceivedSpan[] {
  return (JSON.parse(text) as JsonBody).resourceSpans.flatMap((rs) => {
    const resource = jsonAttributes(rs.resource?.attributes);
    return rs.scopeSpans.flatMap((ss) =>
      ss.spans.map((s) => ({
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ?? '',
        name: s.name,
        startMs: nanosToMs(s.startTimeUnixNano),
        endMs: nanosToMs(s.endTimeUnixNano),
        attributes: jsonAttributes(s.attributes),
        resource,
        statusCode: s.status?.code ?? 0,
        encoding: 'json',
      })),
    );
  });
}

/** One field of a protobuf message: its number and its value (varint, fixed or length-delimited bytes). */
interface Field {
  no: number;
  int: bigint;
  bytes: Buffer;
}

function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const b = buf[i++]!;
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return v;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const [no, wire] = [key >>> 3, key & 7];
    if (wire === 0) out.push({ no, int: varint(), bytes: Buffer.alloc(0) });
    else if (wire === 1) {
      out.push({ no, int: buf.readBigUInt64LE(i), bytes: buf.subarray(i, i + 8) });
      i += 8;
    } else if (wire === 5) {
      out.push({ no, int: BigInt(buf.readUInt32LE(i)), bytes: buf.subarray(i, i + 4) });
      i += 4;
    } else if (wire === 2) {
      const len = Number(varint());
      out.push({ no, int: 0n, bytes: buf.subarray(i, i + len) });
      i += len;
    } else throw new Error(`protobuf wire type ${wire} at ${i}`);
  }
  return out;
}

const all = (fs: Field[], no: number): Field[] => fs.filter((f) => f.no === no);
const one = (fs: Field[], no: number): Field | undefined => fs.find((f) => f.no === no);

/** A KeyValue list: AnyValue's string 1, bool 2, int 3, double 4. */
function pbAttributes(kvs: Field[]): Record<string, string> {
  return Object.fromEntries(
    kvs.map((kv) => {
      const f = fields(kv.bytes);
      const value = fields(one(f, 2)?.bytes ?? Buffer.alloc(0));
      const s = one(value, 1);
      const b = one(value, 2);
      const n = one(value, 3);
      const d = one(value, 4);
      const text = s
        ? s.bytes.toString('utf8')
        : b
          ? String(b.int === 1n)
          : n
            ? String(BigInt.asIntN(64, n.int))
            : d
              ? String(d.bytes.readDoubleLE(0))
              : '';
      return [one(f, 1)!.bytes.toString('utf8'), text];
    }),
  );
}

function fromProtobuf(body: Buffer): ReceivedSpan[] {
  return all(fields(body), 1).flatMap((rsField) => {
    const rs = fields(rsField.bytes);
    const resource = pbAttributes(all(fields(one(rs, 1)?.bytes ?? Buffer.alloc(0)), 1));
    return all(rs, 2).flatMap((ssField) =>
      all(fields(ssField.bytes), 2).map((spanField) => {
        const s = fields(spanField.bytes);
        const hex = (no: number): string => one(s, no)?.bytes.toString('hex') ?? '';
        const status = fields(one(s, 15)?.bytes ?? Buffer.alloc(0));
        return {
          traceId: hex(1),
          spanId: hex(2),
          parentSpanId: hex(4),
          name: one(s, 5)?.bytes.toString('utf8') ?? '',
          startMs: nanosToMs(one(s, 7)?.int ?? 0n),
          endMs: nanosToMs(one(s, 8)?.int ?? 0n),
          attributes: pbAttributes(all(s, 9)),
          resource,
          statusCode: Number(one(status, 3)?.int ?? 0n),
          encoding: 'protobuf',
        };
      }),
    );
  });
}
