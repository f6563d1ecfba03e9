// Which OTEL_* settings make a run export its spans (src/cli/trace-spans.ts), read as the
// OpenTelemetry SDK reads them: nothing set, disabled, or another exporter: no export.
import { describe, expect, it } from 'vitest';
import { exportLimitMs, traceExportWish } from '../../src/cli/trace-spans.js';

describe('trace export settings', () => {
  it('exports only when an OTLP endpoint or exporter is asked for', () => {
    expect(traceExportWish({})).toEqual({ export: false });
    expect(traceExportWish({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toEqual({
      export: true,
      protocol: 'http/protobuf',
    });
    expect(
      traceExportWish({
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      }),
    ).toEqual({ export: true, protocol: 'http/json' });
    expect(
      traceExportWish({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      }),
    ).toEqual({ export: true, protocol: 'http/protobuf' });
    expect(traceExportWish({ OTEL_TRACES_EXPORTER: 'otlp' })).toEqual({ export: true, protocol: 'http/protobuf' });
  });

  it('does not export when disabled, with another exporter, or over gRPC, and says why when worth it', () => {
    expect(traceExportWish({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_SDK_DISABLED: 'TRUE' })).toEqual({
      export: false,
    });
    expect(traceExportWish({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_TRACES_EXPORTER: 'none' })).toEqual({
      export: false,
    });
    expect(traceExportWish({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_TRACES_EXPORTER: 'zipkin' })).toEqual({
      export: false,
      warning: 'OTEL_TRACES_EXPORTER=zipkin: leasejob exports traces over otlp only',
    });
    expect(
      traceExportWish({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
    ).toMatchObject({
      export: false,
      warning: expect.stringContaining('grpc'),
    });
  });

  it('bounds the export by 3 s, or the standard timeout variables, and by 1 s once told to stop', () => {
    expect(exportLimitMs({})).toBe(3000);
    expect(exportLimitMs({ OTEL_EXPORTER_OTLP_TIMEOUT: '10000' })).toBe(10000);
    expect(exportLimitMs({ OTEL_EXPORTER_OTLP_TIMEOUT: '10000', OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '500' })).toBe(500);
    expect(exportLimitMs({ OTEL_EXPORTER_OTLP_TIMEOUT: 'soon' })).toBe(3000);
    expect(exportLimitMs({ OTEL_EXPORTER_OTLP_TIMEOUT: '10000' }, true)).toBe(1000);
    expect(exportLimitMs({ OTEL_EXPORTER_OTLP_TIMEOUT: '200' }, true)).toBe(200);
  });
});
