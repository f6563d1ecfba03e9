export function faketimeLibrary(): string | undefined;
export function faketimeEnv(
  library: string,
  clockFile: string,
): {
  LD_PRELOAD: string;
  FAKETIME_TIMESTAMP_FILE: string;
  FAKETIME_NO_CACHE: string;
  FAKETIME_DONT_FAKE_MONOTONIC: string;
};
